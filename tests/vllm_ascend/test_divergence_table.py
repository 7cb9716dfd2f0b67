"""Each vllm-ascend generation's divergence table, checked against its tests and its page.

One parametrized test over the tables (``sim/impls/vllm_ascend*/divergences.py``): every
entry's ``pinned_by`` names a test that exists in that generation's test folder, and its
page (``docs/DIVERGENCES-vllm-ascend*.md``) has a row for every entry and no other. A table
entry whose pinning test was renamed or removed, or a page that drifted, fails here.
"""

from __future__ import annotations

import importlib
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
TABLES = [
    ("sim.impls.vllm_ascend.divergences", "tests/vllm_ascend", "docs/DIVERGENCES-vllm-ascend.md"),
    ("sim.impls.vllm_ascend_0_13.divergences", "tests/vllm_ascend_0_13", "docs/DIVERGENCES-vllm-ascend-0.13.md"),
]


def _page_ids(page: str) -> set[str]:
    """The ids of the divergence table's rows: the first cell of rows whose last cell names a test."""
    rows = [line for line in (ROOT / page).read_text().splitlines() if line.startswith("| `")]
    return {re.match(r"\| `([^`]+)`", row).group(1) for row in rows if "test_" in row.rsplit("|", 2)[1]}


@pytest.mark.parametrize(("module", "folder", "page"), TABLES, ids=[t[1].split("/")[1] for t in TABLES])
def test_every_divergence_is_pinned_and_on_its_page(module, folder, page):
    table = importlib.import_module(module).DIVERGENCES
    for d in table.values():
        for pin in d.pinned_by.split(", "):  # "file.py::test" (one pin per entry in the tables)
            file, _, test = pin.partition("::")
            source = (ROOT / folder / file).read_text()
            assert re.search(rf"^def {re.escape(test)}\(", source, re.M), f"{d.id}: {folder}/{pin} does not exist"
    assert _page_ids(page) == set(table), f"{page} rows differ from {module}"
