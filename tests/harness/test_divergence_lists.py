"""An implementation's own list of accepted divergences (``--divergences PATH``) replaces the table's."""

from __future__ import annotations

from pathlib import Path

import pytest

from sim.impls import read_divergence_list
from sim.oracle.rules import CORE
from tests.meta import known_defect_gate

pytestmark = pytest.mark.order(-3)

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


# ``python -m sim run`` and ``replay`` take the same list, and a failure's replay line carries it.


def test_the_cli_holds_an_unlisted_defect_to_the_spec_and_its_replay_line_names_the_list(tmp_path, monkeypatch, capsys):
    import tests.meta.known_defect_gate  # noqa: F401 - registers defect:present, the core with a known defect
    from sim.cli import main

    monkeypatch.chdir(tmp_path)
    empty, listing = tmp_path / "none.txt", tmp_path / "listed.txt"
    empty.write_text("# this repository accepts no divergence\n")
    listing.write_text("padded-seq-lens-not-lowered\n")
    # no draft past max_model_len: there the core with the defect gives attention seq_lens past its own bound,
    # which no divergence accepts
    run = ["run", "--impl", "defect:present", "--seed", "1", "--requests", "6", "--k", "3", "--max-model-len", "512"]
    assert main([*run, "--divergences", str(listing)]) == 0
    assert main([*run, "--divergences", str(empty)]) == 1
    out = capsys.readouterr().out
    saved = "failures/run-seed-1.json"
    assert f"  replay: python -m sim replay {saved} --impl defect:present --divergences {empty}\n" in out
    assert main(["replay", saved, "--impl", "defect:present", "--divergences", str(empty)]) == 1
    assert main(["replay", saved, "--impl", "defect:present", "--divergences", str(listing)]) == 0
    assert main(["replay", saved, "--impl", "defect:present"]) == 0  # the harness's table accepts it


def test_the_cli_warns_of_an_entry_that_matches_nothing_and_refuses_a_missing_list(tmp_path, monkeypatch, capsys):
    import tests.meta.known_defect_gate  # noqa: F401
    from sim.cli import main

    monkeypatch.chdir(tmp_path)
    listing = tmp_path / "listed.txt"
    listing.write_text("padded-seq-lens-not-lowered\nno-such-divergence\n")
    case = ["--impl", "defect:present", "--seed", "1", "--requests", "4", "--k", "2", "--max-model-len", "512"]
    assert main(["run", *case, "--divergences", str(listing)]) == 0
    out = capsys.readouterr().out
    assert f"--divergences {listing}: 'no-such-divergence' matches no divergence of defect:present\n" in out
    assert main(["run", *case, "--divergences", str(tmp_path / "absent.txt")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and f"--divergences {tmp_path / 'absent.txt'}: No such file or directory" in err[0], err


def test_the_gates_replay_line_names_the_list(tmp_path, monkeypatch):
    from devices import load_device
    from sim.serving.scenario import default_scenario
    from tests.checks.e2e_checks import check_implementation

    monkeypatch.chdir(tmp_path)
    empty = tmp_path / "none.txt"
    empty.write_text("")
    impl, _ = known_defect_gate.present().accepting_list(empty)
    scenario = default_scenario(seed=1, num_requests=6, num_spec_tokens=3, max_model_len=512)
    with pytest.raises(AssertionError, match=rf"replay: .* --impl defect:present --divergences {empty}"):
        check_implementation(impl, scenario, load_device("sim"), "listed")


def test_a_rank_case_accepts_the_list_given_on_the_command_line(tmp_path):
    """``run``/``replay --divergences`` on DP or TP ranks: the listed ids replace those the case names."""
    import dataclasses

    from sim.cli import ranks

    @dataclasses.dataclass(frozen=True)
    class RankCase:  # the field DpCase and TpCase share
        divergences: tuple[str, ...] | None = ("padded-seq-lens-not-lowered",)

    empty = tmp_path / "none.txt"
    empty.write_text("")
    impl = known_defect_gate.present()
    assert ranks.accepting(RankCase(), impl) == RankCase()  # no list: the case's own ids
    listed, _ = impl.accepting_list(empty)
    assert ranks.accepting(RankCase(), listed).divergences == ()
