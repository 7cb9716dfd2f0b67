"""Survivors of ``mutmut run`` run again on real ranks: the multi-process PCP and TP suites.

mutmut picks each mutant's tests from the coverage it recorded in one process,
so it never runs the multi-process suites: a mutant that matters only with two
or more ranks (which rows a rank pads, what its peers gather) survives it. This
runs each surviving mutant of the grouped modules again in ./mutants, with
``MUTANT_UNDER_TEST`` set before pytest starts: the rank processes (forked from
a server that pytest starts) run the mutant too. The suites are the cases and
properties of ``tests/properties/test_pcp.py`` and ``tests/properties/test_tp.py`` that compare ranks
with one rank (profile ``mutate``), stopping at the first failure; the unmutated
tree must pass them first. Results go to ``mutants/ranks.json``;
``scripts.mutation_score`` counts a mutant killed here as killed.

    python -m scripts.mutants_on_ranks            # every surviving mutant of the grouped modules not run yet
    python -m scripts.mutants_on_ranks NAME ...   # these mutants
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time

from scripts.mutation_score import KILLED, MUTANTS, RANKS, mutmut_status

GROUPED = ("mtp.pcp_proposer.", "mtp.pcp_tp.", "mtp.tp.", "mtp.shared_expert_dp.", "mtp.collectives.", "mtp.model.")
SUITES = ["tests/properties/test_pcp.py", "tests/properties/test_tp.py", "-k", "equal"]
TIMEOUT_S = 600


def survivors() -> list[str]:
    """Mutants of the grouped modules that ``mutmut run`` left alive."""
    return sorted(
        n for n, s in mutmut_status().items() if s not in KILLED and s != "not checked" and n.startswith(GROUPED)
    )


def run_on_ranks(name: str) -> str:
    """ "killed", "timeout" or "survived": the suites, with mutant ``name`` ("" for none) in every process."""
    cmd = [sys.executable, "-m", "pytest", *SUITES, "--device", "sim", "-x", "-q", "-p", "no:xdist"]
    cmd += ["-p", "no:cacheprovider", "--hypothesis-profile", "mutate"]
    env = dict(os.environ, MUTANT_UNDER_TEST=name)
    try:
        done = subprocess.run(cmd, cwd=MUTANTS, env=env, capture_output=True, text=True, timeout=TIMEOUT_S)
    except subprocess.TimeoutExpired:
        return "timeout"
    if done.returncode not in (0, 1) or (not name and done.returncode):  # 2-5: nothing ran as it should
        raise RuntimeError(f"{name or 'unmutated'}: pytest exited {done.returncode}\n{done.stdout[-3000:]}")
    return "survived" if done.returncode == 0 else "killed"


def main(names: list[str]) -> int:
    if not MUTANTS.is_dir():
        print("no ./mutants: run `mutmut run` first (tox -e mutate)", file=sys.stderr)
        return 2
    results = json.loads(RANKS.read_text()) if RANKS.exists() else {}
    names = names or [n for n in survivors() if n not in results]  # a stopped run goes on where it was
    run_on_ranks("")  # the unmutated tree passes, or nothing below means anything
    start = time.monotonic()
    for i, name in enumerate(names, 1):
        t0 = time.monotonic()
        results[name] = run_on_ranks(name)
        RANKS.write_text(json.dumps(results, indent=1, sort_keys=True))
        print(f"[{i}/{len(names)}] {results[name]:8} {time.monotonic() - t0:5.0f} s  {name}", flush=True)
    alive = [n for n in names if results[n] == "survived"]
    print(f"{len(names) - len(alive)}/{len(names)} killed on ranks in {time.monotonic() - start:.0f} s")
    return 1 if alive else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
