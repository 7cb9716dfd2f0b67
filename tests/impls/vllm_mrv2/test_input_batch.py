"""The input batch MRV2's runner hands ``propose``: vLLM 0.33's own ``InputBatch``, laid out as its kernels lay it out."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import given, settings

from sim.impls.kit import mrv2_runner
from sim.impls.kit.vllm_types import import_vllm
from sim.oracle.cases import to_batch
from tests.impls import suites
from tests.impls.vllm_mrv2.cases import decode_case
from tests.strategies.batches import batch_cases

MODULE = "vllm.v1.worker.gpu.input_batch"


def _make(batch, sampled, vocab_size, cls=None):
    return mrv2_runner.runner_inputs(batch, sampled, vocab_size, batch.num_reqs, cls)


@settings(max_examples=25)
@given(case=batch_cases())
def test_the_input_batch_is_vllms_as_its_runner_lays_it_out(case):
    module = import_vllm(MODULE)
    suites.assert_input_batch_is_the_runners(module, module.InputBatch, _make, case)


def test_a_field_the_harness_does_not_make_is_named():
    """A vLLM whose ``InputBatch`` requires a field the harness does not make fails naming it: no default
    stands in for it."""

    @dataclasses.dataclass
    class Wider(import_vllm(MODULE).InputBatch):
        a_field_of_a_later_vllm: int = dataclasses.field(kw_only=True)

    case = decode_case(max_model_len=64, num_computed=10, k=3, accepted=1)
    batch, sampled = to_batch(case, suites.CPU, True)
    with pytest.raises(LookupError, match="a_field_of_a_later_vllm"):
        _make(batch, sampled, case.config.vocab_size, Wider)
