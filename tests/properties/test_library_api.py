"""The core as a library: building its inputs, "no backup", sample rows in both modes, the eager device."""

from __future__ import annotations

import dataclasses
import functools

import numpy as np
import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st

from devices.eager import EagerDevice
from mtp.batch import NO_BACKUP, SampledTokens, VerifiedBatch
from mtp.proposer import MtpProposer
from mtp.trace import Phase, ProposerUnderTest
from sim.oracle.cases import to_batch, valid_ids
from sim.serving.run import build_models, run_scenario
from sim.serving.scenario import RequestSpec, Scenario
from sim.serving.simulator import ServingSim
from tests.checks.modes import MODES
from tests.strategies.batches import batch_cases

CPU = torch.device("cpu")


@given(case=batch_cases(max_reqs=8))
def test_batch_from_requests_keeps_host_and_device_copies_equal(case):
    batch, _ = to_batch(case, CPU, padded=True)
    for name in ("query_start_loc", "seq_lens", "num_draft_tokens", "block_table"):
        device, host = getattr(batch, name), getattr(batch, f"{name}_cpu")
        assert device.dtype == torch.int32 and host.dtype == np.int64, name
        assert device.tolist() == host.tolist(), name
    widths = {len(r.blocks) for r in case.requests}
    assert batch.block_table_cpu.shape == (len(case.requests), max(widths))
    for row, req in zip(batch.block_table_cpu.tolist(), case.requests):
        assert row == req.blocks + [-1] * (len(row) - len(req.blocks))


def test_batch_from_requests_defaults_to_the_hidden_states_device():
    batch = VerifiedBatch.from_requests(
        query_lens=[2],
        seq_lens=[5],
        num_draft_tokens=[1],
        block_tables=[[3, 1]],
        token_ids=[7, 8],
        positions=[3, 4],
        slot_mapping=[15, 16],
        hidden_states=torch.zeros(2, 4, dtype=torch.float64),
    )
    assert batch.token_ids.dtype == torch.int32 and batch.positions.dtype == torch.int64
    assert batch.query_start_loc_cpu.tolist() == [0, 2] and batch.hidden_states.device == CPU


def test_sampled_tokens_from_requests_take_the_documented_dtypes_and_defaults():
    """Whatever integer types the lists arrive in: an int32 padded tensor on the CPU by default, bool
    ``discarded`` (none discarded when omitted), int64 backups; the unpadded form keeps Python lists."""
    rows = [[5, -1, -1], [np.int16(6), 7, -1]]
    padded = SampledTokens.from_requests(rows, padded=True, backup=np.array([4, 9], dtype=np.int32))
    assert padded.padded.dtype == torch.int32 and padded.padded.device == CPU
    assert padded.padded.tolist() == [[5, -1, -1], [6, 7, -1]] and padded.lists is None
    assert padded.discarded.dtype == bool and padded.discarded.tolist() == [False, False]
    assert padded.backup.dtype == np.int64 and padded.backup.tolist() == [4, 9]
    assert SampledTokens.from_requests(rows, padded=True, backup=[4, 9], device="meta").padded.is_meta
    lists = SampledTokens.from_requests([[5], []], padded=False, backup=[4, 9], discarded=[0, 1])
    assert lists.padded is None and lists.lists == [[5], []]
    assert lists.discarded.dtype == bool and lists.discarded.tolist() == [False, True]


def test_batch_from_requests_takes_the_documented_dtypes_on_the_device_asked():
    """Host copies int64 and device tensors of the documented dtypes whatever integer type the
    inputs arrive in (int32 arrays here), on ``device`` (the meta device: nothing stays behind)."""
    i32 = functools.partial(np.array, dtype=np.int32)
    batch = VerifiedBatch.from_requests(
        query_lens=i32([2, 1]),
        seq_lens=i32([5, 3]),
        num_draft_tokens=i32([1, 0]),
        block_tables=[i32([3, 1]), i32([2])],
        token_ids=i32([7, 8, 9]),
        positions=i32([3, 4, 2]),
        slot_mapping=i32([13, 14, 10]),
        hidden_states=torch.zeros(3, 4),
        mrope_positions=i32([[3, 4, 2]] * 3),
        device="meta",
    )
    for name in ("query_start_loc", "seq_lens", "num_draft_tokens", "block_table"):
        assert getattr(batch, f"{name}_cpu").dtype == np.int64, name
        assert getattr(batch, name).dtype == torch.int32 and getattr(batch, name).is_meta, name
    assert batch.block_table_cpu.tolist() == [[3, 1], [2, -1]]
    assert batch.token_ids.dtype == torch.int32
    for name in ("positions", "slot_mapping", "mrope_positions"):
        assert getattr(batch, name).dtype == torch.int64, name
    for name in ("token_ids", "positions", "slot_mapping", "mrope_positions", "hidden_states"):
        assert getattr(batch, name).is_meta, name


def test_a_batch_of_no_requests_builds_and_is_refused_by_name(device):
    """``from_requests`` checks nothing, even an empty batch; the proposer refuses it by name."""
    batch = VerifiedBatch.from_requests(
        query_lens=[],
        seq_lens=[],
        num_draft_tokens=[],
        block_tables=[],
        token_ids=[],
        positions=[],
        slot_mapping=[],
        hidden_states=torch.zeros(0, 32),
    )
    assert batch.block_table_cpu.shape == (0, 0) and batch.query_start_loc_cpu.tolist() == [0]
    scenario = Scenario()
    model, target = build_models(scenario, device.torch_device)
    proposer = MtpProposer(ServingSim(scenario, target).config, model, device)
    sampled = SampledTokens.from_requests([], padded=False, backup=[])
    with pytest.raises(ValueError, match=r"^query_start_loc=\[0\]: needs shape"):
        proposer.propose(batch, sampled)


def _backup_unusable(case) -> np.ndarray:
    """Requests whose backup the unpadded form can never use: not discarded, with a valid sampled id."""
    vocab = case.config.vocab_size
    return np.array([bool(valid_ids(r, vocab)) for r in case.requests])


@given(case=batch_cases(max_reqs=8))
def test_no_backup_is_accepted_where_it_cannot_be_used(impl, case):
    batch, sampled = to_batch(case, CPU, padded=False)
    want = impl.ops.prepare_call(case.config, batch, sampled)
    unused = _backup_unusable(case)
    without = dataclasses.replace(sampled, backup=np.where(unused, NO_BACKUP, sampled.backup))
    got = impl.ops.prepare_call(case.config, batch, without)
    assert torch.equal(got.next.next_token_ids, want.next.next_token_ids)
    assert torch.equal(got.input_ids, want.input_ids)


@given(case=batch_cases(max_reqs=8), padded=st.booleans(), data=st.data())
def test_no_backup_is_refused_where_it_may_be_used(impl, case, padded, data):
    usable = np.ones(len(case.requests), dtype=bool) if padded else ~_backup_unusable(case)
    candidates = np.flatnonzero(usable).tolist()
    if not candidates:
        return  # every request holds a sampled id: no backup can be used
    r = data.draw(st.sampled_from(candidates), label="request")
    batch, sampled = to_batch(case, CPU, padded)
    backup = sampled.backup.copy()
    backup[r] = NO_BACKUP
    with pytest.raises(ValueError, match=rf"backup\[{r}\]=-1"):
        impl.ops.prepare_call(case.config, batch, dataclasses.replace(sampled, backup=backup))


@given(case=batch_cases(max_reqs=8))
def test_sample_batch_rows_agree_in_both_modes(impl, case):
    rows = [
        impl.ops.prepare_call(case.config, *to_batch(case, CPU, padded)).first.sample_batch_rows
        for padded in (True, False)
    ]
    assert torch.equal(rows[0], rows[1]), f"padded {rows[0].tolist()} != unpadded {rows[1].tolist()}"


class LogitRows(torch.nn.Module):
    """The draft model, recording how many rows each logit computation covers (plumbing, not a value)."""

    def __init__(self, model):
        super().__init__()
        self.model, self.hidden_size, self.rows = model, model.hidden_size, []

    def forward(self, *args):
        return self.model.forward(*args)

    def compute_logits(self, hidden):
        self.rows.append(hidden.shape[0])
        return self.model.compute_logits(hidden)


@pytest.mark.parametrize("mode", MODES[:2])
def test_a_first_call_computes_logits_for_the_batch_rows_only(device, mode):
    """Eagerly, and outside piecewise graphs, logits are computed for the batch's requests only: in
    the first call too, whose capture's dummy runs (which sample every request row) come first."""
    scenario = Scenario(requests=(RequestSpec(0, 9, 4), RequestSpec(0, 5, 4)))
    model, target = build_models(scenario, device.torch_device)
    sim = ServingSim(scenario, target)
    assert sim.config.max_num_reqs > 2, "the check needs buffers larger than the batch"
    counting = LogitRows(model)
    proposer = MtpProposer(sim.config, counting, device, mode=mode)
    it = sim.step(0)
    proposer.propose(*to_batch(it.case, device.torch_device, scenario.padded, it.hidden))
    k = scenario.num_spec_tokens
    assert counting.rows[-k:] == [len(it.case.requests)] * k
    assert mode != "eager" or len(counting.rows) == k


@pytest.mark.parametrize("padded", [True, False])
def test_eager_device_serves_a_run_like_the_reference(padded):
    scenario = Scenario(
        padded=padded, accept="greedy", requests=tuple(RequestSpec(i // 3, 6 + 5 * i, 9) for i in range(8))
    )
    report = run_scenario(scenario, EagerDevice())
    assert report.ok, report.mismatches[:3]
    assert report.drafts_compared > 0


def test_eager_device_refuses_graph_modes():
    scenario = Scenario(requests=(RequestSpec(0, 4, 2),))
    model, target = build_models(scenario, CPU)
    with pytest.raises(ValueError, match="mode='full'"):
        MtpProposer(ServingSim(scenario, target).config, model, EagerDevice(), mode="full")


def test_the_proposer_under_test_shows_what_the_checks_read(device, impl):
    """The implementation's proposer offers ``ProposerUnderTest``: all the oracle reads besides its drafts."""
    scenario = Scenario(requests=(RequestSpec(0, 6, 4),))
    model, target = build_models(scenario, device.torch_device)
    proposer = impl.proposer_cls(ServingSim(scenario, target).config, model, device, ops=impl.ops)
    assert isinstance(proposer, ProposerUnderTest)
    assert set(proposer.captured_sizes()) == set(Phase)
    assert proposer.hidden_dtype.is_floating_point
