"""What the adapters' differential suites (tests/impls/NAME) share.

They skip, with the reason, wherever that implementation cannot be imported (its tox env passes
``--impl NAME``, so there the session stops with the cause instead). ``STALE_ROW_RUN`` reads a
row the upstream code reads before writing it, which pins ``sim.impls.kit.fresh_start``; the
later-steps break shows drafts 2..K compared under a modelled defect.

The bodies several suites run alike are here, each taking the adapter's ops: ``one_decode`` (a
hand-made one-request case), ``both`` (the core's
and the adapter's prepared call of one case), ``assert_next_tokens_match_core``,
``assert_first_pass_matches_core``, ``assert_stale_last_row`` (divergence ``stale-last-row``, pinned
by every adapter whose shift leaves the last row unwritten), ``assert_caller_slot_mapping_compacted``
(``slot-mapping-in-place``), ``assert_steps_match`` (step 4 against a hand-stated rule and the core)
and ``assert_gate_fails`` (a broken upstream method fails the gate's check),
``assert_every_variant_caught`` (each break of a suite's ``*_breaks.py`` is exercised by a test of the
suite, read off the tests without running them), ``assert_backup_token``
(divergence ``backup-token`` of vLLM-based step 1), and the MRV2 speculators' pins of the
divergences vllm-ascend's inherits from vLLM's (``assert_unpadded_runs_the_padded_path``,
``assert_last_sampled_taken_unfiltered``, ``assert_unsampled_row_rejected``,
``assert_stale_rejected_rows``). Each adapter's pin stays
a ``def test_...`` in its own suite (tests/harness/test_divergence_tables.py finds it there).
"""

from __future__ import annotations

import fnmatch
import functools
import importlib
import inspect
import os
import pkgutil
import sys
from pathlib import Path

import numpy as np
import pytest
import torch
from hypothesis import given, settings

from mtp.config import ProposerConfig
from mtp.ops import CoreOps
from sim.impls.kit.vllm_types import to_step_one_inputs
from sim.oracle import reference
from sim.oracle.cases import BatchCase, RequestCase, slot_of, to_batch
from sim.serving.run import build_models
from sim.serving.scenario import RequestSpec, Scenario
from tests.checks.e2e_checks import check_implementation
from tests.checks.parametrized import leaves
from tests.strategies.batches import batch_cases
from tests.strategies.scenarios import scenarios

CPU = torch.device("cpu")
CORE = CoreOps()

# The harness's own tools and hygiene, not the implementation under test: the harness's CI runs them
# (``.ci/run`` sets MTP_SELF_TEST), an implementation's pull request skips them, naming why.
SELF_TEST = pytest.mark.skipif(
    not os.environ.get("MTP_SELF_TEST"),
    reason="the harness's own test, not the implementation's: the harness's CI runs it (MTP_SELF_TEST=1, as .ci/run sets it)",
)


def skip_unless_importable(items, folder: Path, unavailable_reason, label: str) -> None:
    """Mark every collected test under ``folder`` skipped with ``unavailable_reason()``, if it names one."""
    mine = [item for item in items if folder in Path(str(item.path)).parents]
    if not mine:
        return
    reason = unavailable_reason()
    if reason:
        for item in mine:
            item.add_marker(pytest.mark.skip(reason=f"{label} unavailable: {reason}"))


# One request, one draft, padded, vocabulary 32: its batches end on a rejected token's row.
STALE_ROW_RUN = Scenario(
    seed=10,
    num_spec_tokens=1,
    block_size=1,
    max_model_len=32,
    token_budget=2,
    max_num_reqs=1,
    padded=True,
    accept="greedy",
    vocab_size=32,
    max_iterations=24,
    requests=(RequestSpec(0, 1, 2),),
)


def after_a_larger_vocabulary(proposer) -> None:
    """Leave ``proposer``'s input ids past ``STALE_ROW_RUN``'s vocabulary, as a run with 96 ids may."""
    proposer.input_ids.fill_(90)


def later_steps_fed_rolled_hidden_rows(forward):
    """A draft model's ``forward`` whose steps 2..K are handed each request's hidden state one
    request off (rows rolled by one): only drafts 2..K change; no metadata does."""

    @functools.wraps(forward)
    def broken(self, input_ids, positions, hidden_states=None, *args, **kwargs):
        if self.calls >= 1 and hidden_states is not None:  # a later step: the first pass is call 0
            hidden_states = torch.roll(hidden_states, 1, dims=0)
        return forward(self, input_ids, positions, hidden_states, *args, **kwargs)

    return broken


def assert_serving_runs_fail(impl, device, name: str, match: str, padded: bool | None = None, errors=AssertionError):
    """Some serving run of ``impl`` (under its rules) differs from the reference, as ``match`` says
    (or fails with one of ``errors``, saying so)."""

    @settings(settings.get_profile("broken"), derandomize=settings.default.derandomize, max_examples=60)
    @given(scenario=scenarios(padded=padded, max_iterations=10))
    def gate(scenario):
        check_implementation(impl, scenario, device, name)

    with pytest.raises(errors, match=match):
        gate()


def assert_serving_runs_fail_on_a_later_draft(impl, device, name: str, padded: bool | None = None) -> None:
    """Some serving run of ``impl`` (under its rules) differs from the reference at a draft >= 2."""
    assert_serving_runs_fail(impl, device, name, r"draft [2-9]", padded)


def one_decode(vocab: int, sampled: list[int]) -> BatchCase:
    """One decode request (K = 2, 4 tokens known, blocks 7, 2, 5) that sampled ``sampled`` (padded with -1)."""
    cfg = ProposerConfig(
        num_spec_tokens=2, vocab_size=vocab, block_size=4, max_model_len=64, max_num_tokens=8, max_num_reqs=4,
        hidden_size=8,
    )  # fmt: skip
    req = RequestCase(
        tokens=[1, 2, 3, 4], num_computed=5, query_len=3, num_drafts=2,
        sampled=sampled + [-1] * (3 - len(sampled)), discarded=False, blocks=[7, 2, 5],
    )  # fmt: skip
    return BatchCase(cfg, [req], seed=0)


def both(case: BatchCase, padded: bool, ops):
    """(batch, sampled, core's PreparedCall, ``ops``' PreparedCall) of one case."""
    batch, sampled = to_batch(case, CPU, padded)
    return batch, sampled, CORE.prepare_call(case.config, batch, sampled), ops.prepare_call(case.config, batch, sampled)


def assert_next_tokens_match_core(ops, case: BatchCase, padded: bool) -> None:
    """With the batch's own backup as the last known token, the adapter's step 1 is the core's."""
    batch, sampled = to_batch(case, CPU, padded)
    got = ops._next_tokens(case.config, batch, sampled)
    want = CORE.next_tokens(case.config, sampled, CPU)
    assert got.next_token_ids.tolist() == want.next_token_ids.tolist()
    assert got.valid_counts.tolist() == want.valid_counts.tolist()


def assert_backup_token(case: BatchCase, padded_step_one, divergent: bool = True):
    """backup-token: for a real runner state (a discarded request's prompt runs past seq_len), the padded
    step 1 continues from the last prompt token, ``get_token_id(num_tokens_no_spec - 1)``; every other
    request from the core's token. ``padded_step_one(batch, sampled, step_one) -> ids`` is the adapter's
    padded call. ``divergent=False``: an implementation without the divergence (vllm-ascend v0.18.0)
    looks every request up at its seq_len, and continues as the core does. Returns (batch, step_one, the
    core's next ids) for the caller's further checks."""
    cfg = case.config
    batch, sampled = to_batch(case, CPU, padded=True)
    known = batch.seq_lens_cpu + 1 + np.array([2 if r.discarded else 0 for r in case.requests])
    step_one = to_step_one_inputs(batch, sampled, cfg.vocab_size, num_tokens_no_spec=known)
    last_prompt = (np.asarray(sampled.backup) + 1) % cfg.vocab_size  # differs from the backup
    for r, rid in enumerate(step_one.input_batch.req_ids):
        step_one.requests[rid].tokens[int(known[r]) - 1] = int(last_prompt[r])
    got = padded_step_one(batch, sampled, step_one)
    core = CORE.next_tokens(cfg, sampled, CPU).next_token_ids.tolist()
    want = np.where(np.asarray(sampled.discarded), last_prompt, core).tolist() if divergent else core
    assert got.tolist() == want
    for r, rid in enumerate(step_one.input_batch.req_ids):
        looked_up = int(known[r]) - 1 if divergent else int(batch.seq_lens_cpu[r])  # num_tokens_no_spec - 1
        assert step_one.requests[rid].asked == [looked_up]
    return batch, step_one, core


def assert_first_pass_matches_core(core, got, fields) -> None:
    """The first-pass ``fields`` and the base positions of two prepared calls agree."""
    for name in fields:
        assert getattr(got.first, name).tolist() == getattr(core.first, name).tolist(), name
    assert got.base_positions.tolist() == core.base_positions.tolist()


def assert_stale_last_row(ops, case: BatchCase, padded: bool, shift_buffer) -> None:
    """stale-last-row: the first-pass ids are the core's on every row but the batch's last one when that
    row is a rejected token (padded mode only); the upstream shift leaves its buffer's old value there.
    ``shift_buffer(hidden_size)``: the buffer the adapter's shift writes, marked with -7 before a re-run."""
    batch, sampled = to_batch(case, CPU, padded)
    mine = ops.prepare_call(case.config, batch, sampled)  # the adapter's prepared call ...
    want = CORE.prepare_call(case.config, batch, sampled).input_ids.tolist()
    shift_buffer(case.config.hidden_size).fill_(-7)  # ... re-run on a marked buffer
    got = ops.first_pass_input_ids(batch, mine.first, mine.next).tolist()
    last = len(got) - 1
    stale = last not in mine.first.sample_indices.tolist()
    assert stale == (padded and int(mine.first.num_rejected[-1]) > 0)
    assert got[:last] == want[:last]
    assert got[last] == (-7 if stale else want[last])


def assert_caller_slot_mapping_compacted(p, cad, batch, sampled) -> torch.Tensor:
    """slot-mapping-in-place: ``p.prepare_inputs`` compacts the caller's ``cad.slot_mapping`` tensor itself
    (accepted rows first, -1 tail); returns the slots as they were."""
    before = cad.slot_mapping.clone()
    lists = [[] if d else list(ids) for ids, d in zip(sampled.lists, sampled.discarded)]
    spec_cad, rows = p.prepare_inputs(cad, lists, [int(k) for k in batch.num_draft_tokens_cpu])
    n = rows.shape[0]
    assert spec_cad.slot_mapping is cad.slot_mapping
    assert cad.slot_mapping[:n].tolist() == before[rows].tolist()
    assert cad.slot_mapping[n:].tolist() == [-1] * (before.shape[0] - n)
    assert torch.equal(cad.slot_mapping, before) == (n == before.shape[0])
    return before


def assert_steps_match(ops, case: BatchCase, padded: bool, expected, differs) -> list:
    """Step j = 2..K of the adapter equals ``expected(case, accepted_seq_lens, j)`` (positions, seq_lens,
    slots, per request), and differs from the core's exactly on the requests ``differs(base, j)`` names
    (``base``: the request's base position). Returns each step's (positions, seq_lens, slots)."""
    batch, _, _, got = both(case, padded, ops)
    accepted = got.first.accepted_seq_lens.tolist()
    out = []
    for j in range(2, case.config.num_spec_tokens + 1):
        meta = ops.advance_step(case.config, got.base_positions, got.first.accepted_seq_lens, batch.block_table, j)
        meta = (meta.positions.tolist(), meta.seq_lens.tolist(), meta.slot_mapping.tolist())
        assert meta == expected(case, accepted, j)
        core = reference.step(case, j)
        for r, b in enumerate(got.base_positions.tolist()):
            same = (meta[0][r], meta[1][r], meta[2][r]) == (core.positions[r], core.seq_lens[r], core.slot_mapping[r])
            assert same != differs(b, j), (j, r)
        out.append(meta)
    return out


def assert_gate_fails(ops, check, rules, device, padded: bool, match: str | None = None) -> None:
    """The gate's ``check`` of ``ops`` under ``rules`` fails on some batch (the ``broken`` profile),
    with a message matching ``match`` where given."""

    @settings(settings.get_profile("broken"), derandomize=settings.default.derandomize)
    @given(case=batch_cases())
    def gate(case):
        functools.partial(check, padded=padded, rules=rules)(ops, case, device=device)

    with pytest.raises(AssertionError, match=match):
        gate()


def assert_every_variant_caught(suite: str, registry: dict | None = None, shared=()) -> None:
    """Every broken variant of the suite ``suite`` (``tests.impls.NAME``) is exercised by a test of it,
    so that no check loses its teeth on the implementation unseen, as ``tests/meta/test_every_variant_caught.py``
    holds for the core's variants. Read off the tests without running any.

    A variant is a public function or class defined in one of the suite's ``*_breaks.py`` modules, or one
    of ``shared`` (breaks several suites run: a module, for all it defines, or one function or class). A
    test of the suite (``test_*.py``) exercises one when it names it: among its parametrize values, or in
    its code (that of the functions nested in it and of the module's helpers it calls included), by name
    or as an attribute of a module it names, or by its name in ``registry`` (``broken_gate.VARIANTS``:
    name -> a tuple holding the break), as a constant or a parametrize value. A factory of breaks
    (``host_mirror_not_advanced(field)``) is one variant, whatever its arguments.
    """
    package = importlib.import_module(suite)
    variants = set(_defined([*_modules(package, "*_breaks"), *(s for s in shared if inspect.ismodule(s))]))
    variants |= {s for s in shared if not inspect.ismodule(s)}
    assert variants, f"no broken variant found in {suite}: is its *_breaks.py read?"
    named = set()
    for module in _modules(package, "test_*"):
        if module.__name__.rsplit(".", 1)[1] != "test_every_variant_caught":
            named |= _named_by_tests(module)
    for name in [n for n in named if isinstance(n, str) and n in (registry or {})]:
        named.update(item for item in registry[name] if callable(item))
    exercised = {_maker(obj) for obj in named if inspect.isfunction(obj) or inspect.isclass(obj)}
    uncaught = sorted(f"{v.__module__}:{v.__qualname__}" for v in variants - exercised)
    assert not uncaught, f"broken variants no test of {suite} exercises: {uncaught}"


def _modules(package, pattern: str):
    """The modules of ``package`` whose names match ``pattern`` (``fnmatch``)."""
    for info in pkgutil.iter_modules(package.__path__):
        if fnmatch.fnmatchcase(info.name, pattern):
            yield importlib.import_module(f"{package.__name__}.{info.name}")


def _defined(modules):
    """The public functions and classes the ``modules`` define."""
    for module in modules:
        for name, obj in vars(module).items():
            if not name.startswith("_") and (inspect.isfunction(obj) or inspect.isclass(obj)):
                if obj.__module__ == module.__name__:
                    yield obj


def _maker(obj):
    """The module-level function or class ``obj`` is, or was made by (a factory's ``breaking``: the factory)."""
    module = sys.modules.get(obj.__module__)
    return vars(module).get(obj.__qualname__.split(".")[0], obj) if module else obj


def _named_by_tests(module) -> set:
    """The functions, classes and strings the tests of ``module`` name (see ``assert_every_variant_caught``)."""
    named, seen = set(), set()
    todo = [fn for name, fn in vars(module).items() if name.startswith("test") and inspect.isfunction(fn)]
    while todo:
        fn = todo.pop()
        if fn in seen:
            continue
        seen.add(fn)
        for mark in getattr(fn, "pytestmark", []):
            if mark.name == "parametrize":
                for value in mark.args[1]:
                    named.update(
                        v for v in leaves(value) if isinstance(v, str) or inspect.isfunction(v) or inspect.isclass(v)
                    )
        fn = getattr(getattr(fn, "hypothesis", None), "inner_test", fn)  # a @given test's own body
        for code in _codes(fn.__code__):
            objects = [fn.__globals__[n] for n in code.co_names if n in fn.__globals__]
            objects += [vars(m)[n] for m in objects if inspect.ismodule(m) for n in code.co_names if n in vars(m)]
            named.update(o for o in objects if inspect.isfunction(o) or inspect.isclass(o))
            named.update(c for c in code.co_consts if isinstance(c, str))
            todo += [o for o in objects if inspect.isfunction(o) and o.__module__ == module.__name__]
    return named


def _codes(code):
    yield code
    for const in code.co_consts:
        if inspect.iscode(const):
            yield from _codes(const)


def assert_every_host_read_made(ops, host_reads) -> None:
    """Each named host read (``sim.impls.kit.host_reads``) is one the padded path really makes, on the code
    under test: a read renamed or moved upstream is a stale entry, not a silent exemption."""
    from devices.sync_watch import watch_host_syncs

    case = one_decode(16, [3, -1])
    batch, sampled = to_batch(case, CPU, padded=True)
    with watch_host_syncs() as log:
        ops.prepare_call(case.config, batch, sampled)
    made = [(op, log.frames[site]) for op, site in log.counts]
    assert [read for read in host_reads if not any(read.matches(op, frame) for op, frame in made)] == []


def assert_unpadded_runs_the_padded_path(ops, case: BatchCase) -> None:
    """no-unpadded-path (an MRV2 speculator): the same batch with unpadded lists prepares exactly as padded
    (every row kept, seq_lens not lowered); the core's unpadded path drops the rejected rows."""
    padded, unpadded = (ops.prepare_call(case.config, *to_batch(case, CPU, p)) for p in (True, False))
    for name in ("token_indices", "query_start_loc", "seq_lens", "accepted_seq_lens", "sample_indices"):
        assert getattr(padded.first, name).tolist() == getattr(unpadded.first, name).tolist(), name
    assert padded.next.next_token_ids.tolist() == unpadded.next.next_token_ids.tolist()
    want = reference.first_pass(case, padded=False)
    dropped = sum(want.num_rejected) > 0
    assert (unpadded.first.token_indices.tolist() != want.token_indices) == dropped


def assert_last_sampled_taken_unfiltered(input_batch_module, decode_case) -> None:
    """unfiltered-last-sampled (MRV2's ``post_update``, ``input_batch_module``'s): an id past the vocabulary
    (96 + 3) inside the sampler's count becomes the next token; the core would skip it."""
    rows = torch.tensor([[5, 96 + 3, -1, -1]], dtype=torch.int64)
    last = torch.zeros(1, 1, dtype=torch.int64)
    input_batch_module.post_update(
        torch.tensor([0]), torch.zeros(1, dtype=torch.int32), last, None, rows,
        torch.tensor([2], dtype=torch.int32), torch.tensor([2], dtype=torch.int32), None,
        torch.zeros(1, 4, dtype=torch.int32), torch.zeros(1, dtype=torch.int32),
    )  # fmt: skip
    assert last.tolist() == [[99]]
    case = decode_case(max_model_len=64, num_computed=10, k=3, accepted=1)
    case = case._replace(requests=[case.requests[0]._replace(sampled=[5, 99, -1, -1])])
    assert reference.next_token(case.requests[0], 96) == (5, 1)  # the core's filter


def assert_unsampled_row_rejected(ops, decode_case) -> None:
    """unsampled-row-rejected (MRV2's counts): a prefill of 4 rows (no drafts verified) whose sampled row is
    all placeholders: the core rejects nothing and samples its last row; MRV2 counts one logit minus none
    sampled as one rejected row and samples the row before it. Both continue from the backup."""
    case = decode_case(max_model_len=64, num_computed=0, k=3, accepted=0)
    req = case.requests[0]._replace(num_drafts=0, query_len=4, sampled=[-1, -1, -1, -1])
    _, sampled, core, got = both(case._replace(requests=[req]), True, ops)
    assert core.first.num_rejected.tolist() == [0] and core.first.sample_indices.tolist() == [3]
    assert got.first.num_rejected.tolist() == [1] and got.first.sample_indices.tolist() == [2]
    assert got.next.next_token_ids.tolist() == core.next.next_token_ids.tolist() == [int(sampled.backup[0])]


def assert_stale_rejected_rows(ops, proposer_cls, device, decode_case) -> None:
    """stale-rejected-rows (MRV2's prefill kernel): of a request that rejected 2 of its 3 drafts, the first
    pass writes ids and positions up to the sample row only; its 2 rejected rows keep the buffer's values
    (zeros on a fresh speculator), where the core shifts the ids and copies the target's positions."""
    from sim.serving.run import build_models

    case = decode_case(max_model_len=64, num_computed=10, k=3, accepted=1)
    batch, sampled = to_batch(case, CPU, padded=True)
    core = CORE.prepare_call(case.config, batch, sampled)
    got = ops.prepare_call(case.config, batch, sampled)
    assert got.first.sample_indices.tolist() == core.first.sample_indices.tolist() == [1]
    assert got.input_ids[:2].tolist() == core.input_ids[:2].tolist()
    assert got.input_ids[2:].tolist() == [0, 0] != core.input_ids[2:].tolist()
    scenario = Scenario(num_spec_tokens=3, block_size=4, max_model_len=64, requests=(RequestSpec(0, 4, 4),))
    proposer = proposer_cls(case.config, build_models(scenario, CPU)[0], device)
    proposer.record()
    proposer.propose(batch, sampled)
    positions = proposer.trace[0].positions.tolist()
    assert positions[:2] == [10, 11] and positions[2:] == [0, 0]  # target positions 12, 13 never copied


# MRV2's overflow-clamp on a serving run: drafts reach max_model_len, and requests reject (both MRV2 suites).
MRV2_OVERFLOWING = Scenario(
    num_spec_tokens=3, max_model_len=24, requests=(RequestSpec(0, 6, 30), RequestSpec(1, 18, 10), RequestSpec(0, 3, 8))
)


def assert_overflowing_steps_write_kv_at_the_last_position(device, proposer_cls, case: BatchCase, clamps: bool):
    """overflow-clamp, its consequence: ``case`` is a decode (K = 3, max_model_len 16, block size 4) whose
    draft 2 lies at max_model_len - 1 (step 2) and draft 3 past it (step 3). A proposer that clamps writes
    step 3's KV over step 2's, at the slot of position max_model_len - 1; the core's step 3 writes nothing."""
    scenario = Scenario(num_spec_tokens=3, block_size=4, max_model_len=16, requests=(RequestSpec(0, 4, 4),))
    model, _ = build_models(scenario, CPU, poison_kv=False)
    proposer = proposer_cls(case.config, model, device)
    proposer.record()
    proposer.propose(*to_batch(case, CPU, padded=True))
    last = slot_of(case.requests[0].blocks, 15, 4)
    slots = [int(rec.slot_mapping[0]) for rec in proposer.trace[1:]]
    assert slots == ([last, last] if clamps else [last, -1])


def assert_input_batch_is_the_runners(input_batch_module, cls, make, case: BatchCase) -> None:
    """The input batch an MRV2 adapter hands ``propose`` (``make(batch, sampled, vocab_size)``: its runner
    inputs) is the generation's own ``cls``, each request's logits rows and their request and place as the
    runner's own kernels of ``input_batch_module`` lay them out (``expand_idx_mapping``,
    ``combine_sampled_and_draft_tokens``), its lengths the batch's, and prefilling where the core's
    request is a partial prefill."""
    batch, sampled = to_batch(case, CPU, True)
    ib = make(batch, sampled, case.config.vocab_size).input_batch
    assert type(ib) is cls, type(ib)
    total = int(ib.cu_num_logits_np[-1])
    assert ib.cu_num_logits.tolist() == ib.cu_num_logits_np.tolist()
    width = int(np.diff(ib.cu_num_logits_np).max())
    expanded, local = input_batch_module.expand_idx_mapping(ib.idx_mapping, total, ib.cu_num_logits, width)
    assert ib.expanded_idx_mapping.tolist() == expanded.tolist(), "expanded_idx_mapping"
    assert ib.expanded_local_pos.tolist() == local.tolist(), "expanded_local_pos"
    b, k = batch.num_reqs, max(width - 1, 1)
    logits = input_batch_module.combine_sampled_and_draft_tokens(
        ib.input_ids.clone(), ib.idx_mapping, torch.zeros(b, 1, dtype=torch.int64), ib.query_start_loc,
        ib.seq_lens, torch.from_numpy(ib.prefill_len_np.copy()), torch.zeros(b, k, dtype=torch.int64),
        ib.cu_num_logits, total,
    )  # fmt: skip
    assert ib.logits_indices.tolist() == logits.tolist(), "logits_indices"
    assert ib.seq_lens_cpu_upper_bound.tolist() == ib.seq_lens.tolist() == list(batch.seq_lens_cpu)
    assert (
        ib.num_computed_tokens_np.tolist() == (ib.seq_lens_cpu_upper_bound.numpy() - ib.num_scheduled_tokens).tolist()
    )
    assert ib.is_prefilling_np.tolist() == [bool(d) for d in sampled.discarded]
