"""The adapter kit (``sim.impls.kit``, ``sim.impls.kit.eager_adapter``) without any upstream project.

What every adapter now runs through one piece: the propose template (validation before any upstream
call, the trace handed over and cleared, K logits counted, int64 [B, K] drafts), the size limits of a
shared proposer (a ``ValueError`` naming the field and its value), what every divergences
module says it lacks, and the ``implementation()`` factory (unavailable: the cause; available: the module's
table, rules and what it lacks). Each check runs on the kit's module as it is, and must fail on every broken
variant of it in ``BREAKS`` (the module's source with one change, loaded beside the real one).
"""

from __future__ import annotations

import inspect
import types
from types import SimpleNamespace

import pytest
import torch
from _pytest.outcomes import Failed

from sim.impls import Skip
from sim.impls.divergence import Divergence, rules_of, table
from sim.impls.features import GRAPHS, Feature
from sim.impls.kit import eager_adapter as eager_module
from sim.impls.kit import factory, tables, tiny_config
from sim.oracle.cases import to_batch
from tests.impls.suites import one_decode

pytestmark = pytest.mark.order(-3)
CPU = torch.device("cpu")


def check_template(module) -> None:
    """``module.EagerAdapter.propose``: validation first, the trace cleared and handed over, K logits, int64 [B, K]."""

    class Recording(module.EagerAdapter):
        """An adapter whose upstream call records what it was handed and drafts 10, 11 as int32."""

        def _propose(self, batch, sampled, k):
            self.calls.append((list(self.model.trace), self.model.trace is self.trace, self.model.calls, k))
            self.trace.append("step")
            return torch.tensor([10 + i for i in range(batch.num_reqs * k)], dtype=torch.int32)

    case = one_decode(16, [3, 4])
    adapter = Recording(case.config, SimpleNamespace(hidden_size=8), CPU)
    adapter.model, adapter.calls = SimpleNamespace(trace="unset", calls=5), []
    adapter.record()
    adapter.trace.append("an earlier call's step")
    batch, sampled = to_batch(case, CPU, padded=True)
    drafts = adapter.propose(batch, sampled)
    assert drafts.dtype == torch.int64 and drafts.tolist() == [[10, 11]]
    assert adapter.calls == [([], True, 0, 2)]  # the trace cleared and handed to the model, its calls reset
    assert adapter.trace == ["step"] and adapter.logits_calls == 2
    batch.seq_lens_cpu[0] = -1  # malformed: refused by the core's validation, before any upstream call
    with pytest.raises(ValueError, match="seq_lens"):
        adapter.propose(batch, sampled)
    assert len(adapter.calls) == 1 and adapter.logits_calls == 2


def check_limits(module) -> None:
    """``module.refuse_past_limits``: a ``ValueError`` naming the field and value past the buffers, none within."""
    for args, message in [
        ((65537,), r"max_model_len=65537: the X adapter is built for at most 65536"),
        ((64, 9, 8), r"num_spec_tokens=9: the X adapter is built for 1\.\.8"),
        ((64, 0, 8), r"num_spec_tokens=0: the X adapter is built for 1\.\.8"),
    ]:
        with pytest.raises(ValueError, match=message):
            module.refuse_past_limits("the X adapter", *args)
    module.refuse_past_limits("the X adapter", 65536, 8, 8)
    module.refuse_past_limits("the X adapter", 64, 1, 8)


DRAFT_KINDS = [
    Feature.DRAFT_ATTN_GROUPS, Feature.MLA_DRAFT, Feature.SFA_DRAFT, Feature.EAGLE, Feature.EAGLE3,
    Feature.DRAFT_MODEL, Feature.MROPE, Feature.ASYNC_SCHEDULING, Feature.RUNNER_SAMPLES, Feature.KERNEL_BLOCKS,
]  # fmt: skip


def check_lacks(module) -> None:
    """``module.lacks``: a draft of several groups, the MLA and SFA families, eagle and eagle3, a draft model, M-RoPE, async
    scheduling, the runner's own sampling and its kernel blocks unless given or had,
    the given features, the host-sync count on the simulator only, the graph modes everywhere."""
    host = module.host_copies("X", "a.item()")
    lacking = module.lacks("X runs eagerly only", host, more={Feature.UNPADDED: Skip("no unpadded path")})
    assert list(lacking) == [
        *DRAFT_KINDS, Feature.UNPADDED, Feature.HOST_SYNC_COUNT, *GRAPHS,
    ]  # fmt: skip
    assert lacking[Feature.DRAFT_ATTN_GROUPS] is module.ONE_DRAFT_LAYER
    assert lacking[Feature.MLA_DRAFT] is lacking[Feature.SFA_DRAFT] is module.GQA_DRAFT
    assert lacking[Feature.EAGLE] is lacking[Feature.EAGLE3] is module.MTP_ONLY
    assert lacking[Feature.DRAFT_MODEL] is module.NO_DRAFT_MODEL
    assert lacking[Feature.MROPE] is module.TEXT_ONLY
    assert lacking[Feature.ASYNC_SCHEDULING] is module.SYNC_RUNNER
    assert lacking[Feature.RUNNER_SAMPLES] is module.HANDED_SAMPLES
    assert lacking[Feature.KERNEL_BLOCKS] is module.WHOLE_BLOCKS
    reason = (
        "X keeps its host copies as torch CPU tensors (a.item()); on a CPU device the simulator counts them as syncs"
    )
    assert lacking[Feature.HOST_SYNC_COUNT].reason == reason
    assert lacking[Feature.HOST_SYNC_COUNT].applies_to("sim")
    assert not lacking[Feature.HOST_SYNC_COUNT].applies_to("accelerator")
    for graphs in GRAPHS:
        assert lacking[graphs] == Skip("X runs eagerly only") and lacking[graphs].applies_to("accelerator")
    assert list(module.lacks("eager")) == [*DRAFT_KINDS, *GRAPHS]
    had = module.lacks("eager", has=(Feature.EAGLE3, Feature.ASYNC_SCHEDULING))
    assert Feature.EAGLE3 not in had and Feature.ASYNC_SCHEDULING not in had and Feature.MROPE in had


def check_factory(module) -> None:
    """``module.implementation``: unavailable, the cause (and nothing built); available, the module's pieces."""
    divergences = table(Divergence("d", "f", "core", "impl", "test_x.py::test_d", rule={"stale_last_row": True}))
    pieces = SimpleNamespace(DIVERGENCES=divergences, RULES=rules_of(divergences.values()), LACKS=tables.lacks("eager"))
    with pytest.raises(module.ImplementationUnavailable, match="implementation 'x' is unavailable: not installed"):
        module.implementation("x", lambda: "not installed", None, object, pieces, describe=pytest.fail)
    impl = module.implementation("x", lambda: None, "ops", object, pieces, describe=lambda: "x 1.0")
    assert (impl.name, impl.ops, impl.proposer_cls, impl.describe) == ("x", "ops", object, "x 1.0")
    assert impl.divergences == tuple(divergences.values()) and impl.rules.stale_last_row
    assert impl.lacks == pieces.LACKS and impl.lacks is not pieces.LACKS
    assert module.implementation("x", lambda: None, "ops", object, pieces).describe == "x"


CHECKS = {"template": (check_template, eager_module), "limits": (check_limits, tiny_config)}
CHECKS |= {"lacks": (check_lacks, tables), "factory": (check_factory, factory)}

BREAKS = [
    ("template", "        validate_batch(batch, self.cfg)\n        validate_sampled(sampled, batch, self.cfg)\n", ""),
    ("template", "            self.trace.clear()\n", "            pass\n"),
    ("template", "drafts.to(torch.int64).view", "drafts.view"),
    ("template", "self.logits_calls += k", "self.logits_calls += 1"),
    ("template", "self.model.trace, self.model.calls = self.trace, 0", "self.model.trace = self.trace"),
    ("limits", "    if max_model_len > MAX_MODEL_LEN:", "    if False:"),
    ("limits", "not 1 <= num_spec_tokens", "not 0 <= num_spec_tokens"),
    ("limits", "max_model_len > MAX_MODEL_LEN", "max_model_len >= MAX_MODEL_LEN", ValueError),  # 65536 refused
    ("lacks", '        devices=("sim",),', "        devices=None,"),
    ("lacks", "    lacking.update(dict.fromkeys(GRAPHS, Skip(eager_only)))\n", ""),
    ("lacks", "        lacking[Feature.HOST_SYNC_COUNT] = host_sync\n", "        pass\n"),
    ("factory", "    if reason:\n", "    if False:\n"),
    ("factory", "dict(divergences.LACKS)", "divergences.LACKS"),
    ("factory", "describe=describe() if describe else", "describe=describe.__name__ if describe else"),
]


def broken(module, old: str, new: str):
    """``module`` loaded again from its source with ``old`` (found exactly once) replaced by ``new``."""
    source = inspect.getsource(module)
    assert source.count(old) == 1, f"{module.__name__}: the broken variant's text is not there once: {old!r}"
    variant = types.ModuleType(f"{module.__name__}_broken")
    exec(compile(source.replace(old, new), f"{module.__file__} (broken)", "exec"), variant.__dict__)
    return variant


@pytest.mark.parametrize("name", list(CHECKS))
def test_the_kit_passes_its_check(name):
    check, module = CHECKS[name]
    check(module)


@pytest.mark.parametrize("brk", BREAKS, ids=[f"{b[0]}:{b[2].strip() or 'dropped'}" for b in BREAKS])
def test_each_check_fails_on_a_broken_kit(brk):
    """A failed assertion (or a ``pytest.raises`` that saw nothing), or the error the break itself causes."""
    name, old, new, *symptom = brk
    check, module = CHECKS[name]
    with pytest.raises((AssertionError, Failed, *symptom)):
        check(broken(module, old, new))


def test_a_fresh_start_puts_back_the_tensors_a_proposer_holds_in_lists():
    """vllm-ascend's per-step buffers (``slot_mapping_group``: a list of tensors) start each run as built,
    like the tensors a proposer holds itself; views of them stay valid (restored in place)."""
    from sim.impls.kit.fresh_start import remember_fresh, start_fresh

    proposer = SimpleNamespace(own=torch.zeros(3), per_step=[torch.zeros(4), torch.full((2,), -1)])
    remember_fresh(proposer)
    view = proposer.per_step[0][:2]
    proposer.own += 5
    proposer.per_step[0][:] = 7
    proposer.per_step[1][:] = 9
    start_fresh(proposer)
    assert proposer.own.tolist() == [0, 0, 0]
    assert [t.tolist() for t in proposer.per_step] == [[0, 0, 0, 0], [-1, -1]]
    assert view.tolist() == [0, 0]
