"""Parts of the core's input contract that the reference does not model.

Run by the gate (`tox -e sim`), not by the `--impl vllm` / `--impl vllm_ascend`
envs: whether an upstream proposer honours them is for its adapter to pin.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import given

from sim.oracle.cases import to_batch
from tests.checks import core_checks
from tests.strategies.batches import batch_cases

pytestmark = pytest.mark.order(0)


@given(case=batch_cases())
def test_discarded_samples_are_ignored(device, impl, case):
    """A discarded request's sample listed anyway (vLLM may hand it) changes nothing."""
    core_checks.check_discarded_samples_ignored(impl.ops, case, device)


@given(case=batch_cases())
def test_int64_sampled_ids_are_accepted(device, impl, case):
    core_checks.check_int64_padded_ids_accepted(impl.ops, case, device)


@given(case=batch_cases(max_reqs=8))
def test_a_block_table_as_wide_as_the_drafts_reach_is_enough(device, impl, case):
    """Drafts reach position seq_len + K - 2, capped below max_model_len: a table exactly that wide
    is accepted, one column narrower is refused, naming the block table."""
    cfg = case.config
    batch, sampled = to_batch(case, device.torch_device, padded=False)
    last = np.minimum(batch.seq_lens_cpu + cfg.num_spec_tokens - 2, cfg.max_model_len - 1)
    width = int((last // cfg.block_size + 1).max())
    exact = dataclasses.replace(batch, block_table_cpu=batch.block_table_cpu[:, :width])
    impl.ops.prepare_call(cfg, exact, sampled)
    short = dataclasses.replace(batch, block_table_cpu=batch.block_table_cpu[:, : width - 1])
    with pytest.raises(ValueError, match=r"block_table\["):
        impl.ops.prepare_call(cfg, short, sampled)
