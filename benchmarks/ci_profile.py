"""Where `.ci/run`'s time goes: per tox env, per pytest session, per test and per property.

Runs `.ci/run` (or `tox -e ENV,...` with ``--env``) as CI does, with tox's result JSON and hypothesis'
observations switched on, then prints:

- the wall time, and how much of it came before the tox run whose envs the rows are (``.ci/run``:
  installing tox, then every env's dependencies two envs at a time);
- per env: its wall time, env creation, the installs (deps and ``commands_pre``), and each pytest session;
- per pytest session (its JUnit XML, ``reports/junit-*.xml``): wall time, the start-up before pytest's
  session begins (interpreter, plugins, ``--impl`` loading its upstream), the session itself (collection,
  workers' start-up, tests), the tests' summed time, and how busy the workers were;
- the slowest tests, and how many examples each property ran (hypothesis' observability records,
  ``.hypothesis/observed``) with the time they took.

``python -m benchmarks.ci_profile`` (the whole of ``.ci/run``; in a fresh clone, as CI runs it);
``python -m benchmarks.ci_profile --env sim`` (one env); ``--report-only`` prints the table of the last
run again. Figures go to docs/PERFORMANCE.md with the command and the machine they were measured on.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
REPORTS = ROOT / "reports"
RESULT = REPORTS / "tox-result.json"
OBSERVED = ROOT / ".hypothesis" / "observed"


def run(envs: list[str]) -> float:
    """`.ci/run` (no ``envs``) or tox on ``envs``, recording; its wall time."""
    REPORTS.mkdir(exist_ok=True)
    for old in [RESULT, *REPORTS.glob("junit-*.xml"), *OBSERVED.glob("*_testcases.jsonl")]:
        old.unlink(missing_ok=True)
    env = {**os.environ, "TOX_RESULT_JSON": str(RESULT), "HYPOTHESIS_EXPERIMENTAL_OBSERVABILITY_NOCOVER": "1"}
    cmd = ["tox", "-e", ",".join(envs)] if envs else [str(ROOT / ".ci" / "run")]
    start = time.perf_counter()
    status = subprocess.run(cmd, cwd=ROOT, env=env).returncode
    wall = time.perf_counter() - start
    if status:
        print(f"{' '.join(cmd)} exited {status}: the figures below are of a red run", file=sys.stderr)
    return wall


def _junit(path: Path) -> dict:
    suite = ET.parse(path).getroot()
    suite = suite if suite.tag == "testsuite" else suite.find("testsuite")
    cases = [
        (f"{c.get('classname')}::{c.get('name')}", float(c.get("time") or 0), c.find("skipped") is not None)
        for c in suite.iter("testcase")
    ]
    return {"time": float(suite.get("time")), "cases": cases}


def _session_of(command: list[str]) -> Path | None:
    junit = next((a.split("=", 1)[1] for a in command if a.startswith("--junitxml=")), None)
    return ROOT / junit if junit else None


def _workers(command: list[str]) -> int:
    if "-n" not in command:
        return 1
    n = command[command.index("-n") + 1]
    return (os.cpu_count() or 1) if n == "auto" else int(n)


def env_rows(result: dict) -> tuple[list[str], list[tuple]]:
    """The per-env and per-session lines, and every test case (session, name, seconds, skipped)."""
    lines, cases = [], []
    for name, env in result["testenvs"].items():
        if "result" not in env:
            continue
        total = env["result"]["duration"]
        setup = sum(c["elapsed"] for c in env.get("setup", []))
        tests = sum(c["elapsed"] for c in env.get("test", []))
        lines.append(
            f"| {name} | {total:.0f} | {total - setup - tests:.0f} | {setup:.0f} | {tests:.0f} |"
            f" {'ok' if env['result']['success'] else 'FAILED'} |"
        )
        for command in env.get("test", []):
            junit = _session_of(command["command"])
            if junit is None or not junit.exists():
                continue
            session = _junit(junit)
            busy = sum(t for _, t, _ in session["cases"])
            ran = sum(1 for _, _, skipped in session["cases"] if not skipped)
            workers = _workers(command["command"])
            lines.append(
                f"| &nbsp; {junit.stem.removeprefix('junit-')} | {command['elapsed']:.0f} |"
                f" start-up {command['elapsed'] - session['time']:.0f} | session {session['time']:.0f} |"
                f" tests {busy:.0f} ({ran} run, {len(session['cases']) - ran} skipped) |"
                f" workers busy {busy / max(session['time'] * workers, 1e-9):.0%} |"
            )
            cases += [(junit.stem.removeprefix("junit-"), *case) for case in session["cases"]]
    return lines, cases


def examples() -> dict[str, list]:
    """property -> [examples, seconds] from hypothesis' observations of the run, summed over every
    session that ran it (the observations do not say which implementation a worker tested)."""
    counts: dict[str, list] = defaultdict(lambda: [0, 0.0])
    for path in OBSERVED.glob("*_testcases.jsonl"):
        for line in path.open():
            seen = json.loads(line)
            entry = counts[seen["property"]]
            entry[0] += 1
            entry[1] += sum(v for k, v in seen.get("timing", {}).items() if k.startswith(("execute", "generate")))
    return counts


def report(wall: float | None, top: int = 20) -> None:
    result = json.loads(RESULT.read_text())
    lines, cases = env_rows(result)
    if wall is not None:
        in_tox = sum(env["result"]["duration"] for env in result["testenvs"].values() if "result" in env)
        # .ci/run installs every env's dependencies in a `tox run-parallel --notest` before the tox
        # whose result this is: that, and installing tox, is the time outside it
        print(f"wall time: {wall:.0f} s, of which outside the envs' tox run {wall - in_tox:.0f} s\n")
    print("| env / pytest session | s | env creation / start-up | installs / session | tests | |")
    print("|---|---|---|---|---|---|")
    print("\n".join(lines))
    print(f"\nslowest {top} tests:\n\n| session | test | s |\n|---|---|---|")
    for session, name, seconds, _ in sorted(cases, key=lambda c: -c[2])[:top]:
        print(f"| {session} | `{name}` | {seconds:.1f} |")
    counts = examples()
    if counts:
        print(f"\nexamples per property, every session that ran it (the {top} that took longest):\n")
        print("| property | examples | s |\n|---|---|---|")
        for prop, (n, seconds) in sorted(counts.items(), key=lambda kv: -kv[1][1])[:top]:
            print(f"| `{prop}` | {n} | {seconds:.1f} |")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--env", action="append", default=[], help="a tox env to run (default: all of .ci/run)")
    parser.add_argument("--report-only", action="store_true", help="print the table of the last run again")
    parser.add_argument("--top", type=int, default=20, help="how many tests and properties to list")
    args = parser.parse_args()
    wall = None if args.report_only else run(args.env)
    report(wall, args.top)


if __name__ == "__main__":
    main()
