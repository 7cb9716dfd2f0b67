"""``python -m sim explain``: a known defect's smallest case, what differs there, the acceptance it costs."""

from __future__ import annotations

import pytest

import tests.meta.known_defect_gate  # noqa: F401 - registers defect:present, the core with a known defect
from sim.cli import main

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's


def test_explain_shows_the_case_the_differences_and_the_acceptance_lost(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    page = tmp_path / "page.html"
    assert main(["explain", "padded-seq-lens-not-lowered", "--impl", "defect:present", "--html", str(page)]) == 0
    out = capsys.readouterr().out
    flat = " ".join(out.split())  # the console wraps long lines
    assert (
        "replay: python -m sim replay failures/explain-padded-seq-lens-not-lowered.json --impl defect:present" in flat
    )
    assert "step 2 seq_lens" in flat  # what attention was given, against the spec
    assert "own rules: 0 differences" in flat
    rows = {line.split("│")[1].strip(): line.split("│")[4].strip() for line in out.splitlines() if line.count("│") == 5}
    assert float(rows["2"]) > 0.1, f"no acceptance lost at draft 2: {rows}"  # the defect's cost, at steps >= 2
    assert "padded-seq-lens-not-lowered (defect)" in page.read_text()


def test_an_unknown_divergence_is_one_line_naming_the_known_ones(capsys):
    assert main(["explain", "no-such-thing", "--impl", "defect:present"]) == 2
    err = capsys.readouterr().err
    assert "'no-such-thing': defect:present has no such divergence (known: padded-seq-lens-not-lowered)" in err
