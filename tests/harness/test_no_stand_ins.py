"""What the checks compare is a tensor: a stand-in (the fake ``torch_npu``'s ``MagicMock``) is refused.

The fake ``torch_npu`` answers the NPU calls vllm-ascend makes at import and for streams with
``MagicMock`` objects. They stand in for plumbing only: a trace record and the drafts must be
tensors, so a mock's return value can never reach a comparison.
"""

from __future__ import annotations

from unittest.mock import MagicMock

import pytest
import torch

from mtp.config import ProposerConfig
from mtp.trace import StepRecord
from sim.impls.kit.eager_adapter import EagerAdapter

pytestmark = pytest.mark.order(-3)


def test_a_trace_record_refuses_a_stand_in():
    names = ("input_ids", "positions", "seq_lens", "slot_mapping", "query_start_loc", "sample_indices", "padding_slots")
    real = {name: torch.zeros(2, dtype=torch.int64) for name in names}
    assert StepRecord.capture(1, 4, 2, **real).positions.tolist() == [0, 0]  # real tensors are taken
    with pytest.raises(TypeError, match="positions: a MagicMock, not a tensor"):
        StepRecord.capture(1, 4, 2, **(real | {"positions": MagicMock()}))


def test_an_adapters_drafts_must_be_a_tensor():
    cfg = ProposerConfig(
        num_spec_tokens=2, vocab_size=8, block_size=4, max_model_len=32, max_num_tokens=8, max_num_reqs=2, hidden_size=4
    )
    adapter = EagerAdapter(cfg, type("Model", (), {"hidden_size": 4})(), device=None)
    assert adapter.drafts_to_host(torch.tensor([[1, 2]])) == [[1, 2]]
    with pytest.raises(TypeError, match="drafts: a MagicMock, not a tensor"):
        adapter.drafts_to_host(MagicMock())
