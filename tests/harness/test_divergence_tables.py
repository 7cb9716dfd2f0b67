"""Each implementation's divergence table (Python) and its document agree, and every pin exists.

The Python table (``sim/impls/NAME/divergences.py``) is the source: every id it names has a row
in the document's divergence table with its kind beside it (`` `id` (defect) ``), the document
names no id it lacks, and the test that pins each divergence exists in the implementation's
differential suite, named in that row.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

pytestmark = pytest.mark.order(-3)

ROOT = Path(__file__).resolve().parents[2]
TABLES = [
    ("sim.impls.vllm.divergences", "docs/DIVERGENCES.md", "tests/impls/vllm"),
    ("sim.impls.vllm_ascend.divergences", "docs/DIVERGENCES-vllm-ascend.md", "tests/impls/vllm_ascend"),
    ("sim.impls.vllm_ascend_0_13.divergences", "docs/DIVERGENCES-vllm-ascend-0.13.md", "tests/impls/vllm_ascend_0_13"),
    ("sim.impls.vllm_mrv2.divergences", "docs/DIVERGENCES-vllm-mrv2.md", "tests/impls/vllm_mrv2"),
    ("sim.impls.vllm_ascend_mrv2.divergences", "docs/DIVERGENCES-vllm-ascend-mrv2.md", "tests/impls/vllm_ascend_mrv2"),
]
ROW = re.compile(r"^\| `(?P<id>[a-z0-9]+(?:-[a-z0-9]+)*)`(?: \((?P<note>[^)|]*)\))? \|(?P<rest>.*)$", re.M)


def document_rows(doc: str) -> dict[str, re.Match]:
    """id -> its row, for every row of the document's divergence table."""
    return {m["id"]: m for m in ROW.finditer((ROOT / doc).read_text())}


@pytest.mark.parametrize("module, doc, suite", TABLES, ids=[d for _, d, _ in TABLES])
def test_the_document_lists_exactly_the_tables_divergences(module, doc, suite):
    table = importlib.import_module(module).DIVERGENCES
    rows = document_rows(doc)
    assert set(rows) == set(table), (
        f"{doc}: only in the document {set(rows) - set(table)}, only in {module} {set(table) - set(rows)}"
    )


@pytest.mark.parametrize("module, doc, suite", TABLES, ids=[d for _, d, _ in TABLES])
def test_every_divergence_is_pinned_by_a_test_that_exists(module, doc, suite):
    rows = document_rows(doc)
    for d in importlib.import_module(module).DIVERGENCES.values():
        file, _, test = d.pinned_by.partition("::")
        source = (ROOT / suite / file).read_text()
        assert re.search(rf"^def {test}\(", source, re.M), f"{d.id}: {suite}/{file} has no {test}"
        assert d.pinned_by in rows[d.id]["rest"], f"{d.id}: {doc} does not name its pin {d.pinned_by}"


@pytest.mark.parametrize("module, doc, suite", TABLES, ids=[d for _, d, _ in TABLES])
def test_the_document_gives_each_divergence_its_kind(module, doc, suite):
    rows = document_rows(doc)
    for d in importlib.import_module(module).DIVERGENCES.values():
        note = (rows[d.id]["note"] or "").split(",")[0]
        assert note == str(d.kind), f"{doc}: `{d.id}` ({note}), but its table says {d.kind}"
