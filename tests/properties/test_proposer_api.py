"""The proposer's contract with its caller: errors, reuse, replay."""

from __future__ import annotations

import dataclasses
import re
import types

import numpy as np
import pytest
import torch

from devices.base import GraphError
from mtp.capture_sizes import CaptureSizes
from mtp.config import ProposerConfig
from mtp.proposer import STEP, GraphNotCaptured, MtpProposer
from sim.oracle.cases import to_batch
from sim.serving.run import build_models
from sim.serving.scenario import RequestSpec, Scenario
from sim.serving.simulator import ServingSim
from tests.checks.modes import NEEDS_GRAPHS

pytestmark = pytest.mark.order(1)


def _first_iteration(scenario, device, mode="eager"):
    model, target = build_models(scenario, device.torch_device)
    sim = ServingSim(scenario, target)
    return MtpProposer(sim.config, model, device, mode=mode), sim.step(0)


def _graph_mode_call(device, mrope=False):
    """A piecewise proposer after one call, and that call's inputs (its tests carry ``NEEDS_GRAPHS``)."""
    scenario = Scenario(mrope=mrope, requests=(RequestSpec(0, 9, 4), RequestSpec(0, 5, 4)))
    proposer, it = _first_iteration(scenario, device, mode="piecewise")
    batch, sampled = to_batch(it.case, device.torch_device, True, it.hidden)
    proposer.propose(batch, sampled)
    return proposer, batch, sampled


@pytest.mark.parametrize("padded", [True, False])
def test_bad_call_leaves_proposer_usable(device, padded):
    scenario = Scenario(padded=padded, requests=(RequestSpec(0, 30, 5), RequestSpec(0, 10, 5)))
    proposer, it = _first_iteration(scenario, device)
    batch, sampled = to_batch(it.case, device.torch_device, padded, it.hidden)
    want = proposer.propose(batch, sampled)
    bad_seq = dataclasses.replace(batch, seq_lens_cpu=batch.seq_lens_cpu * 0 - 1)
    with pytest.raises(ValueError, match=r"seq_lens\[0\]=-1"):
        proposer.propose(bad_seq, sampled)
    assert torch.equal(proposer.propose(batch, sampled), want)


@NEEDS_GRAPHS
@pytest.mark.parametrize("buffer, mrope", [("input_ids", False), ("block_table", False), ("mrope_positions", True)])
def test_a_buffer_rebound_after_capture_is_refused_at_replay(device, buffer, mrope):
    """A graph reads the addresses it was captured with: a buffer rebound to a fresh tensor would
    be silently ignored on hardware, so the replay refuses it and names it (M-RoPE's rows included)."""
    proposer, batch, sampled = _graph_mode_call(device, mrope)
    setattr(proposer, buffer, getattr(proposer, buffer).clone())
    with pytest.raises(GraphError, match=f"input '{buffer}' moved"):
        proposer.propose(batch, sampled)


@NEEDS_GRAPHS
def test_a_graph_missing_at_replay_is_named_not_captured_late(device):
    """Graphs are captured only by ``capture_all``: a call that finds none at its size says which
    sizes there are, rather than capturing one in the middle of serving."""
    proposer, batch, sampled = _graph_mode_call(device)
    size = proposer.sizes[STEP].pad(batch.num_reqs)
    del proposer.graphs[(STEP, size)]
    left = sorted(s for phase, s in proposer.graphs if phase == STEP)
    with pytest.raises(GraphNotCaptured, match=re.escape(f"no step graph captured at size {size} (captured: {left})")):
        proposer.propose(batch, sampled)


def test_drafts_reach_the_host_as_ints(device):
    proposer, it = _first_iteration(Scenario(requests=(RequestSpec(0, 6, 3),)), device)
    drafts = proposer.propose(*to_batch(it.case, device.torch_device, True, it.hidden))
    host = proposer.drafts_to_host(drafts)
    assert host == drafts.tolist() and all(type(t) is int for row in host for t in row)


def test_recording_is_on_by_default_and_can_be_turned_off(device):
    proposer, _ = _first_iteration(Scenario(requests=(RequestSpec(0, 6, 3),)), device)
    proposer.record()
    assert proposer.trace == []
    proposer.record(False)
    assert proposer.trace is None


def test_a_block_table_wider_than_the_proposer_holds_is_refused(device):
    scenario = Scenario(requests=(RequestSpec(0, 6, 3),))
    proposer, it = _first_iteration(scenario, device)
    batch, sampled = to_batch(it.case, device.torch_device, True, it.hidden)
    want = proposer.propose(batch, sampled)
    wide = np.full((batch.num_reqs, proposer.max_blocks + 1), -1, dtype=batch.block_table_cpu.dtype)
    wide[:, : batch.block_table_cpu.shape[1]] = batch.block_table_cpu
    table = torch.from_numpy(wide).to(device=device.torch_device, dtype=batch.block_table.dtype)
    too_wide = dataclasses.replace(batch, block_table=table, block_table_cpu=wide)
    with pytest.raises(ValueError, match=rf"^block_table.shape\[1\]={proposer.max_blocks + 1}: the proposer holds "):
        proposer.propose(too_wide, sampled)
    assert torch.equal(proposer.propose(batch, sampled), want)  # and the proposer is still usable


def test_logit_computations_are_counted_from_zero(device):
    """One per phase run: K on a fresh proposer after one call (PCP ranks compare this count)."""
    scenario = Scenario(num_spec_tokens=3, requests=(RequestSpec(0, 6, 3),))
    proposer, it = _first_iteration(scenario, device)
    assert proposer.logits_calls == 0
    proposer.propose(*to_batch(it.case, device.torch_device, True, it.hidden))
    assert proposer.logits_calls == scenario.num_spec_tokens


def test_an_eagle3_config_needs_a_model_that_combines_hidden_states(device):
    scenario = Scenario(method="eagle3", requests=(RequestSpec(0, 4, 2),))
    model, target = build_models(scenario, device.torch_device)
    cfg = ServingSim(scenario, target).config
    plain = types.SimpleNamespace(hidden_size=model.hidden_size, forward=model.forward)  # an MTP layer's interface
    with pytest.raises(ValueError, match="^method='eagle3': the draft model has no combine_hidden_states$"):
        MtpProposer(cfg, plain, device)
    assert MtpProposer(cfg, model, device).cfg.method == "eagle3"


def test_eagle3_takes_the_targets_hidden_states_in_any_float_dtype(device):
    """The auxiliary hidden states are converted to the draft's dtype before they are combined:
    float64 ones give the drafts that float32 ones give."""
    scenario = Scenario(method="eagle3", requests=(RequestSpec(0, 6, 3), RequestSpec(0, 4, 3)))
    proposer, it = _first_iteration(scenario, device)
    batch, sampled = to_batch(it.case, device.torch_device, True, it.hidden)
    want = proposer.propose(batch, sampled)
    wide = dataclasses.replace(batch, hidden_states=batch.hidden_states.to(torch.float64))
    assert torch.equal(proposer.propose(wide, sampled), want)


def test_hidden_size_mismatch_is_named(device):
    scenario = Scenario(requests=(RequestSpec(0, 4, 2),))
    model, target = build_models(scenario, device.torch_device)
    cfg = ServingSim(scenario, target).config
    with pytest.raises(ValueError, match="hidden_size=32"):
        MtpProposer(dataclasses.replace(cfg, hidden_size=16), model, device)


def test_the_default_capture_sizes_are_vllms():
    """1, 2, 4, every multiple of 8 up to the limit, and the limit itself: vLLM's default capture
    sizes below 256. A graph per size: more sizes cost graph memory, fewer cost padded rows."""
    assert CaptureSizes.default(20).sizes == (1, 2, 4, 8, 16, 20)
    assert CaptureSizes.default(17).sizes == (1, 2, 4, 8, 16, 17)
    assert CaptureSizes.default(32).sizes == (1, 2, 4, 8, 16, 24, 32)
    assert CaptureSizes.default(3).sizes == (1, 2, 3)


def test_capture_sizes_outside_the_buffers_are_refused():
    """A size of 0 or past the limit cannot be captured; none left is an error that names them."""
    assert CaptureSizes([0, 4, 9], 8).sizes == (4,)
    with pytest.raises(ValueError, match=r"^capture_sizes=\[0, 9\]: need at least one size in \[1, 8\]$"):
        CaptureSizes([0, 9], 8)


CONFIG = ProposerConfig(
    num_spec_tokens=3, vocab_size=96, block_size=4, max_model_len=96, max_num_tokens=64, max_num_reqs=8
)
SIZES = [f.name for f in dataclasses.fields(ProposerConfig) if f.type == "int"]  # every size, by its type


@pytest.mark.parametrize("name", SIZES)
@pytest.mark.parametrize("value", [0, -1, 2.0, "8"], ids=repr)
def test_a_config_size_that_is_not_a_positive_int_is_refused_by_name(name, value):
    with pytest.raises(ValueError, match=f"^{name}={re.escape(repr(value))}: must be a positive int$"):
        dataclasses.replace(CONFIG, **{name: value})


def test_a_config_mrope_flag_that_is_not_a_bool_is_refused_by_name():
    with pytest.raises(ValueError, match=r"^uses_mrope=1: must be a bool$"):
        dataclasses.replace(CONFIG, uses_mrope=1)
