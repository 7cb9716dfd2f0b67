"""The input batch vllm-ascend's MRV2 runner hands ``propose``: its own ``AscendInputBatch``, laid out as vLLM's kernels lay it out."""

from __future__ import annotations

from hypothesis import given, settings

from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.vllm_ascend_mrv2 import adapter, build
from tests.impls import suites
from tests.strategies.batches import batch_cases


def _maker(device):
    def make(batch, sampled, vocab_size):
        config = build.speculator(32, "mtp").vllm_config  # the config its runner builds attn_state under
        return adapter.runner_inputs(batch, sampled, vocab_size, batch.num_reqs, config, device)

    return make


@settings(max_examples=25)  # of the ci profile's 200: the env's budget (tox.ini)
@given(case=batch_cases())
def test_the_input_batch_is_vllm_ascends_as_its_runner_lays_it_out(device, case):
    cls = import_ascend(adapter.INPUT_BATCH).AscendInputBatch
    module = import_ascend("vllm.v1.worker.gpu.input_batch")
    suites.assert_input_batch_is_the_runners(module, cls, _maker(device), case)
