"""An implementation's own list of accepted divergences (``--divergences PATH``) replaces the table's."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.impls import read_divergence_list
from sim.oracle.rules import CORE
from tests.meta import known_defect_gate

pytestmark = pytest.mark.order(0)

ROOT = Path(__file__).resolve().parents[2]


def test_a_list_keeps_the_divergences_it_names_and_holds_the_rest_to_the_spec():
    impl = known_defect_gate.present()
    kept, unknown = impl.accepting(["padded-seq-lens-not-lowered", "no-such-divergence"])
    assert [d.id for d in kept.divergences] == ["padded-seq-lens-not-lowered"]
    assert kept.rules == impl.rules and not kept.rules.padded_seq_lens_lowered
    assert unknown == ["no-such-divergence"]
    none, _ = impl.accepting([])
    assert none.divergences == () and none.rules == CORE


def test_a_list_file_holds_one_id_a_line_with_comments(tmp_path):
    path = tmp_path / "divergences.txt"
    path.write_text(
        "# accepted by this repository\npadded-seq-lens-not-lowered  # fixed upstream in #1\n\n  other-one\n"
    )
    assert read_divergence_list(path) == {"padded-seq-lens-not-lowered": f"{path}:2", "other-one": f"{path}:4"}


def test_an_entry_that_matches_nothing_warns_and_the_header_shows_what_is_in_force(pytester, tmp_path, monkeypatch):
    monkeypatch.chdir(ROOT)  # the plugin is a module of this repository
    listed = tmp_path / "divergences.txt"
    listed.write_text("padded-seq-lens-not-lowered\nno-such-divergence\n")
    result = pytester.runpytest_subprocess(
        *("-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), "-p", "no:cacheprovider"),
        *("-p", "tests.meta.known_defect_gate", "--impl", "defect:present", "--divergences", str(listed)),
        "--collect-only",
        str(ROOT / "tests/properties/test_known_defects.py"),
    )
    result.stdout.fnmatch_lines(
        [
            "*divergences in force (1): padded-seq-lens-not-lowered (defect)*",
            "*'no-such-divergence' matches no divergence of defect:present*",
        ]
    )


def test_a_missing_list_file_is_one_line_naming_it(pytester, tmp_path):
    result = pytester.runpytest_subprocess(
        *("-c", str(ROOT / "pyproject.toml"), "--rootdir", str(ROOT), "-p", "no:cacheprovider"),
        *("--divergences", str(tmp_path / "absent.txt"), "--collect-only"),
        str(ROOT / "tests/harness/test_lacks.py"),
    )
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--divergences *absent.txt: No such file or directory*"])
