"""The single-process parts of tensor parallel: row splits, padding, the checked all-gather.

What every TP rank computes on its own, checked without process groups (the
multi-process suite, tests/properties/test_tp.py, checks the ranks together); these run
in the gate's fast part, mutation testing included.
"""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from mtp.collectives import END_STEP, CollectiveError, CollectiveMismatchError, checked_all_gather
from mtp.model import SequenceParallel
from mtp.tp import agreed_rows, pad_sample_rows
from sim.serving.scenario import RequestSpec, Scenario


class _Sent(Exception):
    pass


def _split_and_gather(x: torch.Tensor, rows: int, size: int, **dim) -> tuple[list[torch.Tensor], torch.Tensor]:
    """Every rank's chunk of ``x``, and what rank 0 gathers back from what each rank's ``gather`` sent."""
    chunks = [SequenceParallel(rows, r, size, None).shard(x, **dim) for r in range(size)]
    sent = []

    def record(t):
        sent.append(t)
        raise _Sent

    for r in range(size):
        with pytest.raises(_Sent):
            SequenceParallel(rows, r, size, record).gather(chunks[r], **dim)
    return chunks, SequenceParallel(rows, 0, size, lambda _t: torch.cat(sent)).gather(chunks[0], **dim)


@given(rows=st.integers(1, 40), size=st.integers(1, 8), width=st.integers(0, 3))
def test_sequence_parallel_split_and_gather_give_back_the_rows(rows, size, width):
    """Every rank's chunk (padded to a multiple of the size) gathered rank-major, padding cut: the rows.
    Tokens along the last dim ([rows], M-RoPE's [3, rows]) or, by default, the first ([rows, H])."""
    for x, dim in (
        (torch.arange(rows * width).view(width, rows) if width else torch.arange(rows), {"dim": -1}),
        (torch.arange(rows * (width + 1)).view(rows, width + 1), {}),
    ):
        chunks, whole = _split_and_gather(x, rows, size, **dim)
        token_dim = dim.get("dim", 0)
        assert len({c.shape for c in chunks}) == 1 and chunks[0].shape[token_dim] == -(-rows // size)
        assert torch.equal(whole, x)


def check_padding(pad, n: int, agreed: int) -> None:
    """The padding property: exactly ``agreed`` rows, the real ones first; ``ValueError`` past it."""
    rows = torch.arange(1, n + 1)
    if n > agreed:
        with pytest.raises(ValueError, match=rf"sample_indices.shape\[0\]={n}: .* agreed lm-head TP size {agreed}"):
            pad(rows, agreed)
        return
    out = pad(rows, agreed)
    assert out.shape[0] == agreed and torch.equal(out[:n], rows) and not out[n:].any()
    assert out.dtype == rows.dtype, f"padded to {out.dtype}: the rows index a tensor"


@given(n=st.integers(1, 40), agreed=st.integers(1, 40))
def test_sample_rows_pad_to_the_agreed_size_or_fail(n, agreed):
    check_padding(pad_sample_rows, n, agreed)


def test_agreed_size_follows_the_batch_kind():
    assert agreed_rows(24, has_prefill=False, max_num_seqs=8) == 24
    assert agreed_rows(24, has_prefill=True, max_num_seqs=8) == 8


def test_full_graphs_are_refused(device):
    from mtp.tp import LmHeadTpProposer
    from sim.serving.run import build_models
    from sim.serving.simulator import ServingSim

    scenario = Scenario(requests=(RequestSpec(0, 5, 2),))
    model, target = build_models(scenario, device.torch_device)
    config = ServingSim(scenario, target).config
    with pytest.raises(ValueError, match=r"^mode='full': lm-head TP computes logits outside the graphs"):
        LmHeadTpProposer(config, model, device, mode="full", rank=0, size=2, all_gather=None)


def _headers(*rows):
    """An all-gather that answers the header with ``rows`` (one per rank) and the data with itself."""
    return lambda t: torch.tensor(rows) if t.numel() == 3 and t.dtype == torch.int64 else t


def test_matching_headers_let_the_gather_through():
    x = torch.ones(4, 2)
    assert torch.equal(checked_all_gather(_headers([3, 2, 8], [3, 2, 8]), x, 0, 2, (3, 2), False), x)


def test_ranks_at_different_collectives_are_named():
    with pytest.raises(
        CollectiveMismatchError, match=r"rank 0: collective #3 of step 2 \(8 elements\), rank 1: collective #4"
    ):
        checked_all_gather(_headers([3, 2, 8], [4, 2, 8]), torch.ones(4, 2), 0, 2, (3, 2), False)


def test_a_rank_that_closed_early_is_named():
    """Rank 1 skipped a gather and reached its closing gather (``GroupRank.close_collectives``)."""
    with pytest.raises(
        CollectiveMismatchError, match=r"rank 0: collective #7 of step 1 \(8 elements\), rank 1: the closing gather$"
    ):
        checked_all_gather(_headers([7, 1, 8], [7, END_STEP, 1]), torch.ones(4, 2), 0, 2, (7, 1), False)


def test_a_failing_gather_names_the_collective_and_the_rank():
    def broken(_):
        raise RuntimeError("peer gone")

    with pytest.raises(CollectiveError, match=r"collective #5 on rank 1 failed: peer gone"):
        checked_all_gather(broken, torch.ones(2), 1, 2, (5, 1), False)


def test_a_group_of_one_checks_its_own_header():
    x = torch.ones(3)
    assert torch.equal(checked_all_gather(_headers([1, 1, 3]), x, 0, 1, (1, 1), False), x)


def test_inside_a_capture_no_header_is_read():
    sent = []
    checked_all_gather(lambda t: sent.append(t) or t, torch.ones(2), 0, 1, (1, 1), True)
    assert len(sent) == 1 and sent[0].dtype == torch.float32
