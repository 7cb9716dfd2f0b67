"""``python -m sim``: every bad argument or file is one line naming it, with exit status 2; no traceback."""

from __future__ import annotations

import json

import pytest

from sim.cli import main
from sim.serving.report import FORMAT

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's


def _error_line(capsys, argv) -> str:
    status = main(argv)
    out, err = capsys.readouterr()
    assert status == 2, f"{argv}: exit status {status}\n{out}\n{err}"
    assert "Traceback" not in out + err
    lines = err.strip().splitlines()
    assert len(lines) == 1, f"{argv}: more than one line:\n{err}"
    return lines[0]


def _write(tmp_path, name: str, text: str) -> str:
    path = tmp_path / name
    path.write_text(text)
    return str(path)


@pytest.mark.parametrize(
    ("argv", "names"),
    [
        (["run", "--requests", "-5"], ["--requests", "-5"]),
        (["run", "--requests", "many"], ["--requests", "many"]),
        (["run", "--k", "0"], ["--k", "0"]),
        (["run", "--block-size", "-1"], ["--block-size", "-1"]),
        (["run", "--seeds", "3..x"], ["--seeds", "3..x"]),
        (["run", "--seeds", "-2"], ["--seeds", "-2"]),
        (["run", "--graph-mode", "turbo"], ["--graph-mode", "turbo"]),
        (["run", "--pcp", "0"], ["--pcp", "0"]),
        (["run", "--impl", "nope"], ["--impl", "nope"]),
        (["run", "--device", "npu"], ["--device", "npu", "torch_npu"]),
        (["run", "--pcp", "2", "--impl", "vllm"], ["--pcp", "--impl vllm"]),
        (["run", "--tp", "2"], ["tp=2", "lmhead_tp=False", "shared_expert_dp=False"]),
        (["run", "--shared-expert-dp"], ["tp=1", "shared_expert_dp=True"]),
        (["run", "--reduce-sample"], ["--reduce-sample", "--impl core", "--impl vllm_ascend --tp N"]),
        (["run", "--tp", "2", "--lmhead-tp", "--graph-mode", "full"], ["graph_mode='full'", "lmhead_tp"]),
        (["run", "--tp", "2", "--lmhead-tp", "--impl", "vllm"], ["tp=2", "--impl"]),
        (["run", "--tp", "2", "--lmhead-tp", "--shared-expert-dp", "--pcp", "2"], ["--pcp 2", "one TP path"]),
        (["run", "--seeds", "1..2", "--save", "x.json"], ["--save", "--seeds"]),
        (["replay", "missing.json"], ["missing.json", "no such file"]),
        (["report", "missing.json"], ["missing.json", "no such file"]),
        (["sensitivity", "--trials", "0"], ["--trials", "0"]),
    ],
)
def test_bad_argument_is_one_line_with_status_2(capsys, argv, names):
    line = _error_line(capsys, argv)
    for name in names:
        assert name in line, f"{argv}: {name!r} not named in: {line}"


@pytest.mark.parametrize(
    ("content", "names"),
    [
        ('{"seed": 1, "colour": "red"}', ["colour='red'", "unknown field"]),
        ('{"seed": "1"}', ["seed='1'", "int"]),
        ('{"padded": 1}', ["padded=1", "bool"]),
        ('{"tp": 4}', ["tp=4", "lmhead_tp=False"]),
        ('{"accept": "most"}', ["accept='most'"]),
        ('{"capture_sizes": []}', ["capture_sizes=[]", "non-empty list of ints"]),
        ('{"capture_sizes": [2, "4"]}', ["capture_sizes=[2, '4']", "non-empty list of ints"]),
        ('{"capture_sizes": [0, 8]}', ["capture_sizes=[0, 8]", "[1, token_budget=64]"]),
        ('{"capture_sizes": [16], "max_num_reqs": 8}', ["capture_sizes=[16]", "max_num_reqs=8"]),
        ('{"requests": [{"arrival": 0, "prompt_len": 5, "max_new_tokens": 2, "x": 1}]}', ["requests[0].x=1"]),
        ('{"requests": {"arrival": 0}}', ["requests="]),
        ("[1, 2]", ["expected a JSON object"]),
        ("not json", ["not JSON"]),
    ],
)
def test_bad_replay_file_is_one_line_with_status_2(capsys, tmp_path, content, names):
    path = _write(tmp_path, "case.json", content)
    line = _error_line(capsys, ["replay", path])
    for name in [path, *names]:
        assert name in line, f"{name!r} not named in: {line}"


@pytest.mark.parametrize(
    ("content", "names"),
    [
        ('{"seed": 1}', ["format=None"]),
        (json.dumps({"format": FORMAT, "runs": []}), ["runs=[]"]),
        ("{", ["not JSON"]),
    ],
)
def test_bad_report_file_is_one_line_with_status_2(capsys, tmp_path, content, names):
    path = _write(tmp_path, "run.json", content)
    line = _error_line(capsys, ["report", path])
    for name in [path, *names]:
        assert name in line, f"{name!r} not named in: {line}"


def test_debug_shows_the_traceback(tmp_path):
    path = _write(tmp_path, "case.json", '{"colour": 1}')
    with pytest.raises(ValueError, match="colour=1"):
        main(["replay", path, "--debug"])


def test_sweep_json_holds_the_tables_figures_and_draws(capsys, tmp_path):
    out = tmp_path / "run.json"
    assert main(["run", "--seeds", "4..5", "--requests", "4", "--k", "2", "--json", str(out)]) == 0
    runs = json.loads(out.read_text())["runs"]
    assert [r["scenario"]["seed"] for r in runs] == [4, 5]
    for run in runs:
        assert run["ok"] and run["drafts_compared"] > 0 and run["scenario"]["num_spec_tokens"] == 2
        assert [a["position"] for a in run["acceptance"]] == [1, 2]
        for a in run["acceptance"]:
            assert a["rate"] == pytest.approx(a["accepted"] / a["verified"])
    assert main(["report", str(out)]) == 0
    page = (tmp_path / "run.html").read_text()
    assert "data:image/png;base64," in page and "<td>5</td>" in page


def test_failing_replay_exits_1_and_its_json_holds_the_mismatches(tmp_path):
    case = _write(
        tmp_path,
        "case.json",
        '{"block_size": 2, "accept": "all", "requests": [{"arrival": 0, "prompt_len": 7, "max_new_tokens": 12}]}',
    )
    out = tmp_path / "bad.json"
    assert main(["replay", case, "--ops", "tests.meta.broken_ops:SlotPlusOne", "--json", str(out)]) == 1
    runs = json.loads(out.read_text())["runs"]
    assert not runs[0]["ok"] and runs[0]["mismatches"][0]["iteration"] >= 0


def test_a_replay_file_carries_its_tp_paths(capsys, tmp_path):
    """A scenario file with tp 2 and shared-expert DP replays on 2 ranks, compared with one; a broken
    proposer named on the command line fails it."""
    case = _write(
        tmp_path,
        "case.json",
        '{"tp": 2, "shared_expert_dp": true, "num_spec_tokens": 2, "max_iterations": 4,'
        ' "requests": [{"arrival": 0, "prompt_len": 7, "max_new_tokens": 4}]}',
    )
    assert main(["replay", case]) == 0
    assert "shared-expert DP on 2 TP ranks equals one rank" in capsys.readouterr().out
    assert main(["replay", case, "--proposer", "tests.meta.broken_sedp:RowsInterleaved"]) == 1
    capsys.readouterr()
    assert main(["replay", case, "--pcp", "2"]) == 0
    assert "shared-expert DP on 2 TP ranks x 2 PCP ranks equals one rank" in capsys.readouterr().out
