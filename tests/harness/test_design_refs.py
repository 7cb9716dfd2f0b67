"""Every citation of docs/DESIGN.md in the repository points at something the design holds.

Citations name a quoted section (``docs/DESIGN.md "MTP semantics"``), a section by its
heading word (``docs/DESIGN.md, Layout``), steps (``steps 1-4``, ``step 3``) or a bug class
(``bug class 13``); each must exist there.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.order(-3)

ROOT = Path(__file__).resolve().parents[2]
DESIGN = (ROOT / "docs" / "DESIGN.md").read_text()
HEADINGS = {line.lstrip("#").strip() for line in DESIGN.splitlines() if line.startswith("#")}
CITATION = re.compile(
    r'docs/DESIGN\.md(?:,)?\s*(?:"(?P<quoted>[^"]+)"|(?P<word>Layout)|(?P<steps>steps? [\d-]+)|bug class (?P<cls>\d+))'
)


def _citations():
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    for name in files:
        if name.endswith((".py", ".md", ".toml", ".ini", ".yml")) and name not in (
            "docs/DESIGN.md",
            "tests/harness/test_design_refs.py",
        ):
            text = " ".join((ROOT / name).read_text().split())  # a citation may wrap
            for m in CITATION.finditer(text):
                yield name, m


def _missing(m) -> str | None:
    if m["quoted"]:
        return None if m["quoted"] in HEADINGS else f"section {m['quoted']!r}"
    if m["word"]:
        return None if m["word"] in HEADINGS else f"section {m['word']!r}"
    if m["steps"]:
        numbers = [int(n) for n in re.findall(r"\d+", m["steps"])]
        wanted = range(numbers[0], numbers[-1] + 1)
        absent = [n for n in wanted if not any(h.startswith(f"Step {n}") for h in HEADINGS)]
        return f"steps {absent}" if absent else None
    return None if re.search(rf"^{m['cls']}\. ", DESIGN, re.M) else f"bug class {m['cls']}"


def test_every_design_citation_points_at_a_section_that_exists():
    found = list(_citations())
    assert len(found) > 10, "the citation pattern no longer matches the repository's citations"
    bad = [f"{name}: {m.group(0)!r}: no {why}" for name, m in found if (why := _missing(m))]
    assert not bad, "\n".join(bad)


def test_a_citation_of_a_missing_section_is_reported():
    m = CITATION.search('docs/DESIGN.md "No such section"')
    assert _missing(m) == "section 'No such section'"
    assert _missing(CITATION.search("docs/DESIGN.md steps 1-7")) == "steps [5, 6, 7]"
