"""The end-to-end check: a scenario's drafts and metadata equal the reference.

On failure the scenario is written to ``failures/NAME.json`` and the message
gives the one command that replays it.
"""

from __future__ import annotations

from pathlib import Path

from sim.run import run_scenario

FAILURE_DIR = Path("failures")


def replay_command(path: Path, device, ops=None) -> str:
    cmd = f"python -m sim replay {path} --device {device.name}"
    if ops is not None and type(ops).__module__ != "mtp.ops":
        cmd += f" --ops {type(ops).__module__}:{type(ops).__name__}"
    return cmd


def check_scenario(scenario, device, name: str, ops=None):
    report = run_scenario(scenario, device, ops=ops)
    if not report.ok:
        path = scenario.save(FAILURE_DIR / f"{name}.json")
        lines = "\n  ".join(str(m) for m in report.mismatches[:6])
        raise AssertionError(
            f"{len(report.mismatches)} mismatches:\n  {lines}\nreplay: {replay_command(path, device, ops)}"
        )
    return report
