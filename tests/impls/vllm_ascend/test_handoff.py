"""The runner's hand-off: vllm-ascend's own ``NPUModelRunner.propose_draft_token_ids`` drafts every call.

The adapter hands each batch to the runner's method (compiled from source, ``runner_source``),
which derives ``_propose``'s arguments as the runner does. Here: which of its branches the
harness's batches take (a serving run's first batch is all prefills: no request verified drafts,
so the runner has no ``SpecDecodeMetadata`` and hands the target's rows as they are), what it hands
``_propose`` (a rank without DCP or PCP: no prefill or decode counts), and that a serving run
through it still matches the reference under vllm-ascend's rules.
"""

from __future__ import annotations

import ast
import contextlib
import dataclasses
import sys

import pytest
from hypothesis import given
from hypothesis import strategies as st

from sim.impls.kit.ascend import runner_source
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.vllm_ascend import generation, handoff
from sim.impls.vllm_ascend.adapter import AscendProposer, _proposer
from sim.impls.vllm_ascend.build import configured_graph
from sim.impls.vllm_ascend.divergences import RULES
from sim.oracle.cases import to_batch
from sim.serving.run import run_scenario
from sim.serving.scenario import RequestSpec, Scenario
from tests.impls.suites import CPU
from tests.impls.vllm_ascend import broken_gate
from tests.impls.vllm_ascend.handoff_breaks import never_prefill_no_cache
from tests.strategies.batches import batch_cases

METHOD = "propose_draft_token_ids"
# branch -> a statement only that branch of the runner's method runs (both generations)
BRANCHES = {
    "padded step 1": "self.drafter.prepare_next_token_ids_padded(",
    "unpadded step 1": "self.drafter.prepare_next_token_ids_cpu(",
    "no spec metadata (prefills only)": "target_token_ids = self.input_ids.gpu[:num_scheduled_tokens]",
    "padded steps 2-3": "self.drafter.prepare_inputs_padded(",
    "unpadded steps 2-3": "self.drafter.prepare_inputs(",
    "no context parallel": "num_prefill_reqs = 0",
    "context parallel": "num_prefill_reqs = self.",
}

SERVING = Scenario(
    num_spec_tokens=2,
    block_size=4,
    token_budget=12,  # the 9-token prompt is chunked: a partial prefill beside decodes
    requests=(RequestSpec(0, 5, 6), RequestSpec(0, 3, 6), RequestSpec(2, 9, 4)),
    max_iterations=12,
)


def branch_lines() -> dict[str, set[int]]:
    """Each branch's source lines in the installed runner's method (a branch absent there: none)."""
    source = runner_source._source().read_text().splitlines()
    runner = next(n for n in runner_source._tree().body if isinstance(n, ast.ClassDef) and n.name == "NPUModelRunner")
    method = next(n for n in runner.body if isinstance(n, ast.FunctionDef) and n.name == METHOD)
    span = range(method.lineno, method.end_lineno + 1)
    return {name: {i for i in span if text in source[i - 1]} for name, text in BRANCHES.items()}


@contextlib.contextmanager
def calls_traced(taken: list[set[int]]):
    """Each call of the runner's method appends the set of its source lines that ran."""
    path = str(runner_source._source())

    def lines(frame, event, arg):
        if event == "line":
            taken[-1].add(frame.f_lineno)
        return lines

    def calls(frame, event, arg):
        if event == "call" and frame.f_code.co_name == METHOD and frame.f_code.co_filename == path:
            taken.append(set())
            return lines
        return None

    before = sys.gettrace()
    sys.settrace(calls)
    try:
        yield
    finally:
        sys.settrace(before)


def serve(device, padded: bool, monkeypatch):
    """A serving run through the adapter: per call, (the branches taken, what ``_propose`` was handed)."""
    handed, taken = [], []
    original = handoff.Drafter._propose

    def recording(self, **kwargs):
        cad = kwargs["common_attn_metadata"]  # as handed: the buffers and metadata change later
        handed.append({**kwargs, "query_lens": cad.query_start_loc_cpu.diff().tolist(), "rows": cad.num_actual_tokens})
        handed[-1].update(attn_state=cad.attn_state, computed=cad.num_computed_tokens_cpu[: cad.num_reqs].tolist())
        handed[-1].update(target_positions=kwargs["target_positions"].clone(), ids=kwargs["target_token_ids"].clone())
        return original(self, **kwargs)

    monkeypatch.setattr(handoff.Drafter, "_propose", recording)
    scenario = dataclasses.replace(SERVING, padded=padded)
    with calls_traced(taken):
        report = run_scenario(scenario, device, proposer_cls=AscendProposer, rules=RULES)
    assert report.ok, [str(m) for m in report.mismatches[:4]]
    branches = branch_lines()
    names = [{name for name, where in branches.items() if where & ran} for ran in taken]
    assert len(names) == len(handed) > 0
    return names, handed


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_the_runners_method_drafts_every_call(device, padded, monkeypatch):
    """Every call runs the runner's own method; the first batch (all prefills) takes its no-metadata
    branch, every batch with a verified draft its steps 2-3; never a context-parallel branch."""
    names, handed = serve(device, padded, monkeypatch)
    step_one, steps = ("padded step 1", "padded steps 2-3") if padded else ("unpadded step 1", "unpadded steps 2-3")
    assert names[0] == {step_one, "no spec metadata (prefills only)", "no context parallel"}, names[0]
    assert handed[0]["token_indices_to_sample"] is None
    later = names[1:]
    assert later and all(n == {step_one, steps, "no context parallel"} for n in later), later
    assert all(h["num_prefill_reqs"] == 0 and h["num_decode_reqs"] == 0 for h in handed)
    assert all(h["long_seq_metadata"] is None for h in handed)


def test_the_first_batch_hands_its_scheduled_rows_as_they_are(device, monkeypatch):
    """With no ``SpecDecodeMetadata`` the runner hands ``_propose`` its first ``num_scheduled_tokens``
    input ids and ``_get_positions`` of them: the whole prefill batch, in order."""
    _, handed = serve(device, True, monkeypatch)
    first = handed[0]
    n = first["num_scheduled_tokens"]
    assert n == first["rows"] == first["ids"].shape[0]
    prompts = [spec.prompt_len for spec in SERVING.requests if spec.arrival == 0]
    assert first["query_lens"] == prompts
    assert first["target_positions"].tolist() == [p for length in prompts for p in range(length)]


def test_each_call_hands_the_attention_state_of_its_batch(device, monkeypatch):
    """The runner's own ``_build_attn_state`` labels each call and ``_propose`` is handed that label: the
    first batch (new prompts only) ``PrefillNoCache``, a partial prefill beside decodes ``ChunkedPrefill``,
    decodes alone ``SpecDecoding``; ``PrefillNoCache`` only where no request has context."""
    states = import_ascend("vllm_ascend.attention.attention_v1").AscendAttentionState
    _, handed = serve(device, True, monkeypatch)
    got = [h["attn_state"] for h in handed]
    assert got[0] == states.PrefillNoCache and {states.ChunkedPrefill, states.SpecDecoding} <= set(got), got
    assert all(any(h["computed"]) != (h["attn_state"] == states.PrefillNoCache) for h in handed), handed


def test_a_runner_that_never_says_prefill_no_cache_drafts_the_same(device, monkeypatch):
    """A runner labelling new prompts ``ChunkedPrefill`` reads their own KV from the cache: the same drafts,
    so the serving run matches the reference (the check is of a state that contradicts its batch)."""
    states = import_ascend("vllm_ascend.attention.attention_v1").AscendAttentionState
    broken_gate.break_runner(broken_gate.ATTN_STATE, never_prefill_no_cache, monkeypatch)
    _, handed = serve(device, True, monkeypatch)
    assert states.PrefillNoCache not in {h["attn_state"] for h in handed}


def test_each_requests_prompt_length_decides_as_the_runner_reads_it():
    """``handoff.prompt_tokens`` (v0.24.0rc's runner dispatches a decode graph only once every prompt is
    computed): a request verifying drafts is past its prompt, a prefill's last chunk ends it (a one-token
    query at a PD handoff included), a discarded chunk is followed by more of it."""
    from types import SimpleNamespace

    import numpy as np

    from sim.impls.vllm_ascend.handoff import prompt_tokens

    batch = SimpleNamespace(seq_lens_cpu=[12, 7, 30, 9], num_draft_tokens_cpu=np.array([3, 0, 0, 0]))
    sampled = SimpleNamespace(discarded=np.array([False, False, True, False]))
    computed = np.array([8, 0, 16, 8])  # the last: a one-token query, its prompt's last token
    prompts = prompt_tokens(batch, sampled, computed)
    assert prompts.tolist() == [8, 7, 31, 9]
    assert (computed >= prompts).tolist() == [True, False, False, False]


@given(case=batch_cases(max_reqs=8), extra=st.integers(1, 8))
def test_a_step_padded_past_the_batch_hands_on_the_unpadded_metadata(case, extra):
    """An eager target step the runner pads past the batch's tokens (on DP ranks, to the largest rank's):
    its metadata is built at the padded token count and handed on through the checkout's ``unpadded``,
    which keeps the batch's requests and offsets and the padded slots (-1 past the batch's) and count."""
    batch, _ = to_batch(case, CPU, padded=True)
    runner = _proposer(case.config).runner
    n, b = batch.num_tokens, batch.num_reqs
    desc = import_ascend("vllm.forward_context").BatchDescriptor(num_tokens=n + extra)
    step = handoff.TargetStep(import_ascend("vllm.config").CUDAGraphMode.NONE, desc)
    handed = handoff.as_built_for_the_target(runner, generation.runner_metadata(batch), step)
    assert (handed.num_reqs, handed.num_actual_tokens, handed.num_input_tokens) == (b, n, n + extra)
    assert handed.query_start_loc_cpu.tolist() == list(batch.query_start_loc_cpu)
    assert handed.seq_lens.tolist() == batch.seq_lens.tolist()
    assert handed.slot_mapping.tolist() == batch.slot_mapping[:n].tolist() + [-1] * extra
    assert handed.block_table_tensor.shape[0] == b


@given(case=batch_cases(max_reqs=8))
def test_the_computed_counts_land_in_the_runners_own_array(case):
    """``handoff.load`` writes each request's computed count into the input batch's array, as the runner's
    ``_update_states`` does, so the tensor it is a view of (``num_computed_tokens_cpu_tensor``, which the
    drafter's dummy run builds a capture's metadata from) holds them too."""
    batch, sampled = to_batch(case, CPU, padded=True)
    runner = configured_graph(case.config, (8,)).runner
    handoff.load(runner, batch, sampled, case.config.vocab_size)
    want = [r.seq_len - r.query_len for r in case.requests]
    assert runner.input_batch.num_computed_tokens_cpu_tensor[: batch.num_reqs].tolist() == want
