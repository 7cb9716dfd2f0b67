"""The mutation score of ``tox -e mutate``, from mutmut's own results.

Reads ``mutmut results --all true`` (one ``NAME: status`` line per mutant), what
``scripts.mutants_on_ranks`` found running mutmut's survivors again on real ranks
(``mutants/ranks.json``, if there), and the equivalent mutants listed in
docs/MUTATION.md (``- `NAME`: reason``).
Score = killed / (mutants run - equivalent ones); a timeout counts as killed
(the mutant made the gate hang), a mutant no test reaches counts as not killed,
and mutants not run (a stopped run, a name glob) are counted apart. Prints the score and every
survivor that is not listed as equivalent; exits 1 if there is any.

    python -m scripts.mutation_score            # after `mutmut run`, in the same directory
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "MUTATION.md"
MUTANTS = Path("mutants")
RANKS = MUTANTS / "ranks.json"
KILLED = {"killed", "timeout", "caught by type check"}


def equivalents(doc: Path = DOC) -> dict[str, str]:
    """Mutant name -> why it cannot change behaviour, from the doc's list."""
    found = {}
    for line in doc.read_text().splitlines():
        m = re.match(r"- `([\w.]+__mutmut_\d+)`: (.+)", line)
        if m:
            found[m.group(1)] = m.group(2)
    return found


def mutmut_status() -> dict[str, str]:
    """Mutant name -> mutmut's status of it ("killed", "survived", "no tests", "not checked", ...)."""
    cmd = [sys.executable, "-m", "mutmut", "results", "--all", "true"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return dict(re.findall(r"^\s*([\w.]+__mutmut_\d+): (.+?)\s*$", out, flags=re.M))


def main() -> int:
    status = mutmut_status()
    on_ranks = json.loads(RANKS.read_text()) if RANKS.exists() else {}
    killed_on_ranks = {n for n, s in status.items() if s not in KILLED and on_ranks.get(n) in KILLED}
    status |= {n: f"{on_ranks[n]} on ranks" for n in killed_on_ranks}
    equiv = equivalents()
    counts = Counter(status.values())
    unchecked = sum(s == "not checked" for s in status.values())  # a run stopped early, or a name glob
    considered = {name: s for name, s in status.items() if name not in equiv and s != "not checked"}
    killed = sum(s in KILLED or n in killed_on_ranks for n, s in considered.items())
    alive = sorted(n for n, s in considered.items() if s not in KILLED and n not in killed_on_ranks)
    print(f"mutants: {len(status)} ({', '.join(f'{n} {s}' for s, n in counts.most_common())})")
    print(f"equivalent (docs/MUTATION.md): {sum(name in status for name in equiv)}")
    score = killed / len(considered) if considered else 1.0
    print(f"mutation score: {killed}/{len(considered)} non-equivalent mutants run were killed = {score:.1%}")
    if unchecked:
        print(f"not run: {unchecked} mutants (the score covers only those run)")
    for name in alive:
        print(f"  not killed: {name} ({considered[name]})  -- see: mutmut show {name}")
    return 1 if alive or unchecked else 0


if __name__ == "__main__":
    sys.exit(main())
