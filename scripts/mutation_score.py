"""The mutation score of ``tox -e mutate``, from mutmut's own results.

Reads ``mutmut results --all true`` (one ``NAME: status`` line per mutant) and what
``scripts.mutants_on_ranks`` found running mutmut's survivors again on real ranks
(``mutants/ranks.json``, if there). Equivalent mutants are not in the results at all:
each is marked in ``mtp/`` with ``# pragma: no mutate`` and its reason, on the line
it would mutate (``git grep -n "no mutate" mtp/``), so mutmut never makes it (the few
that no mark can separate from other mutants show here as not killed; docs/MUTATION.md
lists them).
Score = killed / mutants run; a timeout counts as killed (the mutant made the gate hang),
a mutant no test reaches counts as not killed, a survivor killed on ranks counts as killed,
and mutants not run (a stopped run, a name glob) are counted apart. Prints the score and
every mutant not killed; exits 1 if there is any, or any mutant was not run.

    python -m scripts.mutation_score            # after `mutmut run`, in the same directory
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

MUTANTS = Path("mutants")
RANKS = MUTANTS / "ranks.json"
KILLED = {"killed", "timeout", "caught by type check"}


def mutmut_status() -> dict[str, str]:
    """Mutant name -> mutmut's status of it ("killed", "survived", "no tests", "not checked", ...)."""
    cmd = [sys.executable, "-m", "mutmut", "results", "--all", "true"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return parse_results(out)


def parse_results(out: str) -> dict[str, str]:
    """Mutant name -> status, from the text ``mutmut results --all true`` prints."""
    return dict(re.findall(r"^\s*([\w.]+__mutmut_\d+): (.+?)\s*$", out, flags=re.M))


def score(status: dict[str, str], on_ranks: dict[str, str]) -> tuple[int, int, int, list[str]]:
    """(killed, mutants run, mutants not run, the names of those run and not killed)."""
    ran = {n: s for n, s in status.items() if s != "not checked"}  # "not checked": a stopped run, a name glob
    killed = {n for n, s in ran.items() if s in KILLED or on_ranks.get(n) in KILLED}
    return len(killed), len(ran), len(status) - len(ran), sorted(set(ran) - killed)


def main() -> int:
    status = mutmut_status()
    on_ranks = json.loads(RANKS.read_text()) if RANKS.exists() else {}
    killed, ran, unchecked, alive = score(status, on_ranks)
    shown = status | {
        n: f"{on_ranks[n]} on ranks" for n in status if status[n] not in KILLED and on_ranks.get(n) in KILLED
    }
    counts = Counter(shown.values())
    print(f"mutants: {len(status)} ({', '.join(f'{n} {s}' for s, n in counts.most_common())})")
    print(f"mutation score: {killed}/{ran} mutants run were killed = {killed / ran if ran else 1.0:.1%}")
    print('equivalent mutants are marked in the code and never made: `git grep -n "no mutate" mtp/`')
    if unchecked:
        print(f"not run: {unchecked} mutants (the score covers only those run)")
    for name in alive:
        print(f"  not killed: {name} ({status[name]})  -- see: mutmut show {name}")
    return 1 if alive or unchecked else 0


if __name__ == "__main__":
    sys.exit(main())
