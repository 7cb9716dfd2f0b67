"""The decode node of a prefill/decode split (``Scenario.decode_node``): what arrives, and what is refused.

A request arrives with its prompt's KV in the draft's cache (``transfer_prompt_kv``) and the token the
prefill node sampled. The KV transferred must be exactly what a correct proposer's first pass over the
prompt writes on the prefill node: here it is compared with the core's own prefill, a code path
written independently of the transfer.
"""

from __future__ import annotations

import dataclasses

import pytest
import torch

from devices.sim.device import SimDevice
from mtp.proposer import MtpProposer
from sim.oracle.cases import to_batch
from sim.serving.run import build_models
from sim.serving.scenario import RequestSpec, Scenario
from sim.serving.simulator import ServingSim, transfer_prompt_kv

pytestmark = pytest.mark.order(-3)

PROMPT = Scenario(num_spec_tokens=3, block_size=4, token_budget=32, requests=(RequestSpec(0, 13, 4),))


def _prompt_slots(req) -> torch.Tensor:
    return torch.tensor([req.blocks[p // 4] * 4 + p % 4 for p in range(req.prompt_len)])


@pytest.mark.parametrize("method", ["mtp", "eagle3"])
def test_the_transferred_kv_is_what_a_prefill_nodes_first_pass_writes(method):
    scenario = dataclasses.replace(PROMPT, method=method)
    device = SimDevice()
    model, target = build_models(scenario, torch.device("cpu"))
    prefill = ServingSim(scenario, target)
    it = prefill.step(0)
    batch, sampled = to_batch(it.case, torch.device("cpu"), True, it.hidden)
    MtpProposer(prefill.config, model, device).propose(batch, sampled)
    (written,) = prefill.running

    decode_model, _ = build_models(dataclasses.replace(scenario, decode_node=True), torch.device("cpu"))
    node = ServingSim(
        dataclasses.replace(scenario, decode_node=True),
        target,
        transfer=lambda req: transfer_prompt_kv(decode_model, target, req, scenario.block_size),
    )
    node._admit(0)
    (arrived,) = node.running
    assert arrived.blocks == written.blocks and arrived.num_computed == written.prompt_len
    assert arrived.tokens == it.histories[0]  # the prompt and the token the prefill node sampled
    slots = _prompt_slots(arrived)
    for got, want in ((decode_model.cache.k, model.cache.k), (decode_model.cache.v, model.cache.v)):
        assert torch.allclose(got[slots], want[slots], atol=1e-6)


def test_a_decode_node_needs_the_kv_transfer():
    model, target = build_models(PROMPT, torch.device("cpu"))
    with pytest.raises(ValueError, match=r"^decode_node=True: the serving loop needs the prompts' KV transfer"):
        ServingSim(dataclasses.replace(PROMPT, decode_node=True), target)


@pytest.mark.parametrize("fields", [{"mrope": True}, {"draft_attn_groups": 2}])
def test_a_decode_node_of_more_rows_or_layers_is_refused_by_name(fields):
    with pytest.raises(ValueError, match=r"^decode_node=True with mrope="):
        Scenario(decode_node=True, **fields)


def test_replay_files_without_the_field_load_off_a_decode_node():
    data = dataclasses.asdict(PROMPT)
    del data["decode_node"]
    loaded = Scenario.from_dict(data | {"requests": [dataclasses.asdict(r) for r in PROMPT.requests]})
    assert loaded.decode_node is False
