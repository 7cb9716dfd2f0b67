"""The proposer's contract with its caller: errors, reuse, replay."""

from __future__ import annotations

import dataclasses
import json

import pytest
import torch

from mtp.capture_sizes import CaptureSizes
from mtp.proposer import MtpProposer
from sim.cli import main as sim_main
from sim.oracle.cases import to_batch
from sim.serving.run import build_models
from sim.serving.scenario import RequestSpec, Scenario
from sim.serving.simulator import ServingSim
from tests.broken_ops import SlotPlusOne
from tests.e2e_checks import check_scenario

pytestmark = pytest.mark.order(1)


def _first_iteration(scenario, device):
    model, target = build_models(scenario, device.torch_device)
    sim = ServingSim(scenario, target)
    return MtpProposer(sim.config, model, device), sim.step(0)


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


def test_hidden_size_mismatch_is_named(device):
    scenario = Scenario(requests=(RequestSpec(0, 4, 2),))
    model, target = build_models(scenario, device.torch_device)
    cfg = ServingSim(scenario, target).config
    with pytest.raises(ValueError, match="hidden_size=32"):
        MtpProposer(dataclasses.replace(cfg, hidden_size=16), model, device)


def test_failure_writes_a_case_that_replays(device, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    scenario = Scenario(block_size=2, accept="all", requests=(RequestSpec(0, 7, 12),))
    with pytest.raises(AssertionError) as err:
        check_scenario(scenario, device, "replay-me", ops=SlotPlusOne())
    command = str(err.value).split("replay: ")[-1]
    assert command == "python -m sim replay failures/replay-me.json --device sim --ops tests.broken_ops:SlotPlusOne"
    assert Scenario.from_dict(json.loads((tmp_path / "failures/replay-me.json").read_text())) == scenario
    argv = command.split()[3:]
    assert sim_main(argv) == 1
    assert "slot_mapping" in capsys.readouterr().out
    assert sim_main(argv[:4]) == 0  # the core itself passes the same case


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
