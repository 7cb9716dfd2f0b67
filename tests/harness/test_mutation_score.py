"""``scripts/mutation_score.py`` on a made-up ``mutmut results --all true`` output and made-up diffs.

Equivalent mutants alone on their line are marked in ``mtp/`` with ``# pragma: no mutate``; the
others are listed in docs/MUTATION.md by function and change, and each survivor is matched
against the list through its diff, which the tests pass in instead of running mutmut.
"""

from __future__ import annotations

import json

import pytest

from scripts import mutation_score

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's

RESULTS = """\
    mtp.proposer.xǁMtpProposerǁ_alloc__mutmut_1: killed
    mtp.proposer.xǁMtpProposerǁ_alloc__mutmut_2: timeout
    mtp.next_tokens.x_host_valid_counts__mutmut_1: survived
    mtp.pcp_proposer.xǁPcpProposerǁ_rank_rows__mutmut_3: no tests
    mtp.tp.xǁLmHeadTpProposerǁpropose__mutmut_4: survived
    mtp.batch.xǁVerifiedBatchǁfrom_requests__mutmut_5: not checked
    mtp.proposer.xǁMtpProposerǁ_alloc__mutmut_7: survived
    mtp.proposer.xǁMtpProposerǁ_capture__mutmut_9: survived
"""


def show(name: str, before: str, after: str, above: str = "    n = 1") -> str:
    """A diff as ``mutmut show`` prints it."""
    return "\n".join(
        [
            f"# {name}: survived",
            "--- mtp/x.py",
            "+++ mtp/x.py",
            "@@ -1,3 +1,3 @@",
            f" {above}",
            f"-{before}",
            f"+{after}",
        ]
    )


DIFFS = {
    "mtp.next_tokens.x_host_valid_counts__mutmut_1": show(
        "mtp.next_tokens.x_host_valid_counts__mutmut_1",
        "    return np.array(counts,   dtype=np.int64)",
        "    return np.array(counts, dtype=None)",
    ),
    "mtp.pcp_proposer.xǁPcpProposerǁ_rank_rows__mutmut_3": show(
        "mtp.pcp_proposer.xǁPcpProposerǁ_rank_rows__mutmut_3", "    req = pad - 1", "    req = pad + 1"
    ),
    "mtp.proposer.xǁMtpProposerǁ_alloc__mutmut_7": show(
        "mtp.proposer.xǁMtpProposerǁ_alloc__mutmut_7",
        "    self.ids = torch.zeros(n, dtype=torch.int32, device=dev)",
        "    self.ids = torch.zeros(n, dtype=torch.int32, device=None)",
    ),
    "mtp.proposer.xǁMtpProposerǁ_capture__mutmut_9": show(
        "mtp.proposer.xǁMtpProposerǁ_capture__mutmut_9",
        "        self._metadata(phase, size)",
        "        self._metadata(None, size)",
        above="    if not piecewise:",
    ),
}

DOC = """\
# Mutation testing

- `mtp.next_tokens.host_valid_counts`: `dtype=np.int64` → `dtype=None`: listed before the section, not read.

## Equivalent mutants

- `mtp.next_tokens.host_valid_counts`: `dtype=np.int64` → `dtype=None`: int64 anyway.
- `mtp.proposer.MtpProposer._alloc`: `device=dev` → `device=None`: the host, the simulator's device.
- `mtp.proposer.MtpProposer._capture`: `_metadata(phase, size)` → `_metadata(None, size)` (below `if piecewise:`): the warm-up's.
- `mtp.steps.advance_step`: `torch.int64` → `None`: gone from the code.

## After

- `mtp.steps.advance_step`: `x` → `y`: another section, not read.
"""


def entries():
    return mutation_score.parse_equivalents(DOC)


def test_results_are_read_by_name_with_mutmuts_class_separator():
    status = mutation_score.parse_results(RESULTS)
    assert len(status) == 8
    assert status["mtp.proposer.xǁMtpProposerǁ_alloc__mutmut_2"] == "timeout"
    assert status["mtp.pcp_proposer.xǁPcpProposerǁ_rank_rows__mutmut_3"] == "no tests"


def test_the_doc_lists_entries_of_its_section_only():
    found = entries()
    assert [e.function for e in found] == [
        "mtp.next_tokens.host_valid_counts",
        "mtp.proposer.MtpProposer._alloc",
        "mtp.proposer.MtpProposer._capture",
        "mtp.steps.advance_step",
    ]
    assert found[2].below == "if piecewise:" and found[2].reason == "the warm-up's."
    assert found[1].before == "device=dev" and found[1].after == "device=None"


def test_a_mutant_name_gives_its_function():
    assert mutation_score.function_of("mtp.proposer.xǁMtpProposerǁ_alloc__mutmut_12") == (
        "mtp.proposer.MtpProposer._alloc"
    )
    assert mutation_score.function_of("mtp.next_tokens.x_host_valid_counts__mutmut_2") == (
        "mtp.next_tokens.host_valid_counts"
    )


def test_a_diff_gives_its_changed_lines_whitespace_collapsed_and_the_line_above():
    change = mutation_score.parse_diff(DIFFS["mtp.next_tokens.x_host_valid_counts__mutmut_1"])
    assert change.before == "return np.array(counts, dtype=np.int64)"
    assert change.after == "return np.array(counts, dtype=None)"
    assert change.above == "n = 1"


def test_an_entry_matches_only_its_function_and_its_change_in_place():
    e = mutation_score.Equivalent("mtp.m.f", "device=dev", "device=None", "why")
    change = mutation_score.Change("x = f(device=dev)", "x = f(device=None)", "")
    assert mutation_score.matches(e, "mtp.m.f", change)
    assert not mutation_score.matches(e, "mtp.m.g", change)
    # the rest of the line must be the same on both sides
    assert not mutation_score.matches(
        e, "mtp.m.f", mutation_score.Change("x = f(device=dev)", "y = f(device=None)", "")
    )
    # the fragment must be what changed, not merely present
    assert not mutation_score.matches(e, "mtp.m.f", mutation_score.Change("f(1, device=dev)", "f(2, device=dev)", ""))
    # a fragment occurring twice: the change is found at the second place
    twice = mutation_score.Equivalent("mtp.m.f", "-1", "+1", "why")
    assert mutation_score.matches(twice, "mtp.m.f", mutation_score.Change("a(-1, -1)", "a(-1, +1)", ""))
    below = mutation_score.Equivalent("mtp.m.f", "a", "b", "why", below="if p:")
    assert mutation_score.matches(below, "mtp.m.f", mutation_score.Change("a", "b", "if p:"))
    assert not mutation_score.matches(below, "mtp.m.f", mutation_score.Change("a", "b", "if not p:"))


def test_timeouts_count_as_killed_no_tests_as_not_ranks_can_kill_and_listed_survivors_are_equivalent():
    status = mutation_score.parse_results(RESULTS)
    on_ranks = {"mtp.tp.xǁLmHeadTpProposerǁpropose__mutmut_4": "killed"}
    result = mutation_score.score(status, on_ranks, entries(), DIFFS.__getitem__)
    assert (result.killed, result.ran, result.unchecked) == (3, 7, 1)
    assert result.equivalent == [
        "mtp.next_tokens.x_host_valid_counts__mutmut_1",
        "mtp.proposer.xǁMtpProposerǁ_alloc__mutmut_7",
    ]
    # the _capture entry is for the line below `if piecewise:`; this mutant is below `if not piecewise:`
    assert result.alive == [
        "mtp.pcp_proposer.xǁPcpProposerǁ_rank_rows__mutmut_3",
        "mtp.proposer.xǁMtpProposerǁ_capture__mutmut_9",
    ]
    assert [e.function for e in result.stale] == ["mtp.proposer.MtpProposer._capture", "mtp.steps.advance_step"]


def test_without_a_list_every_survivor_is_not_killed():
    status = mutation_score.parse_results(RESULTS)
    result = mutation_score.score(status, {})
    assert (result.killed, result.ran, result.equivalent, result.stale) == (2, 7, [], [])
    assert len(result.alive) == 5


def test_main_prints_the_score_each_survivor_and_each_stale_entry_and_fails(monkeypatch, tmp_path, capsys):
    (tmp_path / "ranks.json").write_text(json.dumps({"mtp.tp.xǁLmHeadTpProposerǁpropose__mutmut_4": "killed"}))
    (tmp_path / "MUTATION.md").write_text(DOC)
    monkeypatch.setattr(mutation_score, "RANKS", tmp_path / "ranks.json")
    monkeypatch.setattr(mutation_score, "mutmut_status", lambda: mutation_score.parse_results(RESULTS))
    assert mutation_score.main(diff_of=DIFFS.__getitem__, doc=tmp_path / "MUTATION.md") == 1
    out = capsys.readouterr().out
    assert "equivalent (listed in docs/MUTATION.md, matched by function and change): 2" in out
    assert "mutation score: 3/5 non-equivalent mutants run were killed = 60.0%" in out
    assert "not run: 1 mutants" in out
    assert "not killed: mtp.pcp_proposer.xǁPcpProposerǁ_rank_rows__mutmut_3 (no tests)" in out
    assert "not killed: mtp.proposer.xǁMtpProposerǁ_capture__mutmut_9 (survived)" in out
    assert "stale: docs/MUTATION.md lists `mtp.steps.advance_step`: `torch.int64` → `None`, which matches" in out
    assert "host_valid_counts__mutmut_1" not in out.split("mutation score")[1]
    assert "propose__mutmut_4" not in out.split("mutation score")[1]


def test_main_passes_when_every_survivor_is_listed_and_every_entry_matches(monkeypatch, tmp_path, capsys):
    (tmp_path / "MUTATION.md").write_text(
        "## Equivalent mutants\n\n- `mtp.a.f`: `dtype=np.int64` → `dtype=None`: int64 anyway.\n"
    )
    monkeypatch.setattr(mutation_score, "RANKS", tmp_path / "absent.json")
    monkeypatch.setattr(
        mutation_score,
        "mutmut_status",
        lambda: {"mtp.a.x_f__mutmut_1": "killed", "mtp.a.x_f__mutmut_2": "survived"},
    )
    diffs = {"mtp.a.x_f__mutmut_2": show("mtp.a.x_f__mutmut_2", "    y = g(dtype=np.int64)", "    y = g(dtype=None)")}
    assert mutation_score.main(diff_of=diffs.__getitem__, doc=tmp_path / "MUTATION.md") == 0
    out = capsys.readouterr().out
    assert "1/1 non-equivalent mutants run were killed = 100.0%" in out
    assert "equivalent (listed in docs/MUTATION.md, matched by function and change): 1" in out
