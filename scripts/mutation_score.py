"""The mutation score of ``tox -e mutate``, from mutmut's own results.

Reads ``mutmut results --all true`` (one ``NAME: status`` line per mutant), what
``scripts.mutants_on_ranks`` found running mutmut's survivors again on real ranks
(``mutants/ranks.json``, if there), and the equivalent mutants docs/MUTATION.md lists
by function and change (``- `mtp.mod.Class.method`: `before` → `after`: reason``, with
an optional ``(below `line`)`` where the changed line occurs twice in the function).
Equivalent mutants whose line has no other mutant are marked in ``mtp/`` with
``# pragma: no mutate``, so mutmut never makes them.

Each mutant not killed is matched against the list through its diff (``mutmut show``):
the function it mutates, and its changed lines before and after, whitespace collapsed,
must read ``P + before + S`` and ``P + after + S``. A matched mutant is equivalent, left
out of the score and counted apart; an entry that matches no surviving mutant is stale.
Score = killed / (mutants run - equivalent ones); a timeout counts as killed (the mutant
made the gate hang), a mutant no test reaches counts as not killed, a survivor killed on
ranks counts as killed, and mutants not run (a stopped run, a name glob) are counted apart.
Prints the score, every mutant not killed and every stale entry; exits 1 if there is any,
or any mutant was not run.

    python -m scripts.mutation_score            # after `mutmut run`, in the same directory
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

DOC = Path(__file__).resolve().parent.parent / "docs" / "MUTATION.md"
SECTION = "## Equivalent mutants"
MUTANTS = Path("mutants")
RANKS = MUTANTS / "ranks.json"
KILLED = {"killed", "timeout", "caught by type check"}
ENTRY = re.compile(
    r"^- `(?P<function>[\w.]+)`: `(?P<before>[^`]+)` → `(?P<after>[^`]+)`(?: \(below `(?P<below>[^`]+)`\))?: (?P<reason>.+)$"
)


@dataclass(frozen=True)
class Equivalent:
    """One entry of the doc's list: the function, the changed code before and after, and why."""

    function: str
    before: str
    after: str
    reason: str
    below: str | None = None  # the unchanged line just above the change, where its line occurs twice

    def __str__(self) -> str:
        where = f" (below `{self.below}`)" if self.below else ""
        return f"`{self.function}`: `{self.before}` → `{self.after}`{where}"


@dataclass(frozen=True)
class Change:
    """What a mutant's diff changes: its changed lines before and after, and the line above them."""

    before: str
    after: str
    above: str


@dataclass
class Score:
    killed: int
    ran: int
    unchecked: int
    equivalent: list[str] = field(default_factory=list)  # survivors matched by an entry
    alive: list[str] = field(default_factory=list)  # survivors no entry matches
    stale: list[Equivalent] = field(default_factory=list)  # entries matching no survivor


def normalise(code: str) -> str:
    return " ".join(code.split())


def function_of(name: str) -> str:
    """``mtp.proposer.xǁMtpProposerǁ_alloc__mutmut_3`` -> ``mtp.proposer.MtpProposer._alloc``."""
    module, _, mangled = re.sub(r"__mutmut_\d+$", "", name).rpartition(".")
    if mangled.startswith("xǁ"):
        _, cls, method = mangled.split("ǁ")
        return f"{module}.{cls}.{method}"
    return f"{module}.{mangled.removeprefix('x_')}"


def parse_equivalents(doc_text: str) -> list[Equivalent]:
    """The entries of the doc's section on equivalent mutants."""
    found, inside = [], False
    for line in doc_text.splitlines():
        if line.startswith("## "):
            inside = line.strip() == SECTION
        m = ENTRY.match(line) if inside else None
        if m:
            found.append(
                Equivalent(
                    function=m["function"],
                    before=normalise(m["before"]),
                    after=normalise(m["after"]),
                    reason=m["reason"],
                    below=normalise(m["below"]) if m["below"] else None,
                )
            )
    return found


def parse_diff(diff: str) -> Change:
    """The changed lines of a unified diff (``mutmut show``), joined and whitespace collapsed."""
    lines = [line for line in diff.splitlines() if not line.startswith(("--- ", "+++ ", "@@", "# "))]
    first = next((i for i, line in enumerate(lines) if line[:1] in "-+"), len(lines))
    above = next((line[1:] for line in reversed(lines[:first]) if line[1:].strip()), "")

    def side(sign: str) -> str:
        return normalise(" ".join(line[1:] for line in lines if line.startswith(sign)))

    return Change(before=side("-"), after=side("+"), above=normalise(above))


def matches(entry: Equivalent, function: str, change: Change) -> bool:
    """Whether the mutant of ``function`` making ``change`` is the one ``entry`` lists."""
    if entry.function != function or (entry.below is not None and entry.below != change.above):
        return False
    before, after, fb, fa = change.before, change.after, entry.before, entry.after
    if len(before) - len(fb) != len(after) - len(fa):
        return False
    i = before.find(fb)
    while i != -1:
        if before[:i] == after[:i] and after[i : i + len(fa)] == fa and before[i + len(fb) :] == after[i + len(fa) :]:
            return True
        i = before.find(fb, i + 1)
    return False


def score(
    status: dict[str, str],
    on_ranks: dict[str, str],
    equivalents: Iterable[Equivalent] = (),
    diff_of: Callable[[str], str] | None = None,
) -> Score:
    """Killed, run and not run, and the survivors sorted into equivalent ones (by the doc's entries,
    through ``diff_of(name)``, a mutant's diff) and those not killed."""
    ran = {n: s for n, s in status.items() if s != "not checked"}  # "not checked": a stopped run, a name glob
    killed = {n for n, s in ran.items() if s in KILLED or on_ranks.get(n) in KILLED}
    survivors = sorted(set(ran) - killed)
    entries = list(equivalents)
    used: set[Equivalent] = set()
    result = Score(killed=len(killed), ran=len(ran), unchecked=len(status) - len(ran))
    for name in survivors:
        hit = []
        if entries and diff_of is not None:
            change, function = parse_diff(diff_of(name)), function_of(name)
            hit = [e for e in entries if matches(e, function, change)]
        used.update(hit)
        (result.equivalent if hit else result.alive).append(name)
    result.stale = [e for e in entries if e not in used]
    return result


def mutmut_status() -> dict[str, str]:
    """Mutant name -> mutmut's status of it ("killed", "survived", "no tests", "not checked", ...)."""
    cmd = [sys.executable, "-m", "mutmut", "results", "--all", "true"]
    out = subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return parse_results(out)


def parse_results(out: str) -> dict[str, str]:
    """Mutant name -> status, from the text ``mutmut results --all true`` prints."""
    return dict(re.findall(r"^\s*([\w.]+__mutmut_\d+): (.+?)\s*$", out, flags=re.M))


def mutmut_diff(name: str) -> str:
    """The diff of one mutant, as ``mutmut show NAME`` prints it (read from ./mutants)."""
    try:
        import mutmut.__main__  # noqa: F401  (loads mutmut's configuration)
        from mutmut.mutation.diff_apply import get_diff_for_mutant
    except ImportError:
        cmd = [sys.executable, "-m", "mutmut", "show", name]
        return subprocess.run(cmd, capture_output=True, text=True, check=True).stdout
    return get_diff_for_mutant(name)


def main(diff_of: Callable[[str], str] = mutmut_diff, doc: Path = DOC) -> int:
    status = mutmut_status()
    on_ranks = json.loads(RANKS.read_text()) if RANKS.exists() else {}
    equivalents = parse_equivalents(doc.read_text())
    result = score(status, on_ranks, equivalents, diff_of)
    shown = status | {
        n: f"{on_ranks[n]} on ranks" for n in status if status[n] not in KILLED and on_ranks.get(n) in KILLED
    }
    counts = Counter(shown.values())
    considered = result.ran - len(result.equivalent)
    rate = result.killed / considered if considered else 1.0
    print(f"mutants: {len(status)} ({', '.join(f'{n} {s}' for s, n in counts.most_common())})")
    print(f"equivalent (listed in docs/MUTATION.md, matched by function and change): {len(result.equivalent)}")
    print('equivalent and marked in the code, never made: `git grep -n "no mutate" mtp/`')
    print(f"mutation score: {result.killed}/{considered} non-equivalent mutants run were killed = {rate:.1%}")
    if result.unchecked:
        print(f"not run: {result.unchecked} mutants (the score covers only those run)")
    for name in result.alive:
        print(f"  not killed: {name} ({status[name]})  -- see: mutmut show {name}")
    unrun = " (or one not run)" if result.unchecked else ""
    for entry in result.stale:
        print(f"  stale: docs/MUTATION.md lists {entry}, which matches no surviving mutant{unrun}")
    return 1 if result.alive or result.unchecked or result.stale else 0


if __name__ == "__main__":
    sys.exit(main())
