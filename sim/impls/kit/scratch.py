"""One temporary folder per process for what vLLM reads from disk, removed when the process ends.

vLLM reads a model's ``config.json`` from a folder, and gloo's file rendezvous needs a path: each
is made under this process's folder (``scratch``), which ``tempfile.TemporaryDirectory`` removes at
exit, so a session (every xdist worker included) leaves nothing in the temp dir behind.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

_ROOT: tempfile.TemporaryDirectory | None = None


def scratch(name: str) -> Path:
    """The folder ``name`` in this process's temporary folder (made on first use)."""
    global _ROOT
    if _ROOT is None:
        _ROOT = tempfile.TemporaryDirectory(prefix="mtp_harness_")
    path = Path(_ROOT.name) / name
    path.mkdir(exist_ok=True)
    return path
