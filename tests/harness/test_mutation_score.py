"""``scripts/mutation_score.py`` on a made-up ``mutmut results --all true`` output.

Equivalent mutants are marked in ``mtp/`` with ``# pragma: no mutate``, so mutmut never
makes them and the score is killed / run: no list of names to read.
"""

from __future__ import annotations

import json

from scripts import mutation_score

RESULTS = """\
    mtp.proposer.xǁMtpProposerǁ_alloc__mutmut_1: killed
    mtp.proposer.xǁMtpProposerǁ_alloc__mutmut_2: timeout
    mtp.next_tokens.x_host_valid_counts__mutmut_1: survived
    mtp.pcp_proposer.xǁPcpProposerǁ_rank_rows__mutmut_3: no tests
    mtp.tp.xǁLmHeadTpProposerǁpropose__mutmut_4: survived
    mtp.batch.xǁVerifiedBatchǁfrom_requests__mutmut_5: not checked
"""


def test_results_are_read_by_name_with_mutmuts_class_separator():
    status = mutation_score.parse_results(RESULTS)
    assert len(status) == 6
    assert status["mtp.proposer.xǁMtpProposerǁ_alloc__mutmut_2"] == "timeout"
    assert status["mtp.pcp_proposer.xǁPcpProposerǁ_rank_rows__mutmut_3"] == "no tests"


def test_timeouts_count_as_killed_no_tests_as_not_and_ranks_can_kill():
    status = mutation_score.parse_results(RESULTS)
    on_ranks = {"mtp.tp.xǁLmHeadTpProposerǁpropose__mutmut_4": "killed"}
    killed, ran, unchecked, alive = mutation_score.score(status, on_ranks)
    assert (killed, ran, unchecked) == (3, 5, 1)
    assert alive == [
        "mtp.next_tokens.x_host_valid_counts__mutmut_1",
        "mtp.pcp_proposer.xǁPcpProposerǁ_rank_rows__mutmut_3",
    ]


def test_main_prints_the_score_and_each_survivor_and_fails(monkeypatch, tmp_path, capsys):
    (tmp_path / "ranks.json").write_text(json.dumps({"mtp.tp.xǁLmHeadTpProposerǁpropose__mutmut_4": "killed"}))
    monkeypatch.setattr(mutation_score, "RANKS", tmp_path / "ranks.json")
    monkeypatch.setattr(mutation_score, "mutmut_status", lambda: mutation_score.parse_results(RESULTS))
    assert mutation_score.main() == 1
    out = capsys.readouterr().out
    assert "mutation score: 3/5 mutants run were killed = 60.0%" in out
    assert "not run: 1 mutants" in out
    assert "not killed: mtp.next_tokens.x_host_valid_counts__mutmut_1 (survived)" in out
    assert "not killed: mtp.pcp_proposer.xǁPcpProposerǁ_rank_rows__mutmut_3 (no tests)" in out
    assert "propose__mutmut_4" not in out.split("mutation score")[1]


def test_main_passes_when_every_mutant_run_is_killed(monkeypatch, tmp_path, capsys):
    monkeypatch.setattr(mutation_score, "RANKS", tmp_path / "absent.json")
    monkeypatch.setattr(mutation_score, "mutmut_status", lambda: {"mtp.a.x_f__mutmut_1": "killed"})
    assert mutation_score.main() == 0
    assert "1/1 mutants run were killed = 100.0%" in capsys.readouterr().out
