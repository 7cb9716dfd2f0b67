"""A synthetic vllm-ascend history for the bisect's tests: a checkout's sources, then commits on top,
one of which carries a regression (vllm-ascend's own step update advancing ``seq_lens`` by two)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

UPDATE = Path("vllm_ascend/spec_decode/llm_base_proposer.py")
ADVANCE = "        common_attn_metadata.seq_lens[:batch_size] += 1\n"  # the device lengths, once per step
SKIPPED = ("tests", "docs", "examples", "benchmarks", "_build_info.py", "*.egg-info", "__pycache__", ".git")
IDENTITY = ["-c", "user.name=mtp-harness", "-c", "user.email=mtp-harness@localhost"]


def _git(repo: Path, *args: str) -> str:
    return subprocess.run(["git", "-C", str(repo), *IDENTITY, *args], check=True, capture_output=True, text=True).stdout


def build(src: Path, dest: Path, commits: int, broken_at: int | None) -> list[str]:
    """``src`` (a vllm-ascend tree) as the first commit of a new repository ``dest``, then ``commits``
    commits, the one numbered ``broken_at`` (1-based) breaking the step update; the hashes, oldest first."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(*SKIPPED))
    _git(dest, "init", "--quiet", "--initial-branch=main")
    _git(dest, "add", "-A")
    _git(dest, "commit", "--quiet", "-m", "the released sources")
    hashes = [_git(dest, "rev-parse", "HEAD").strip()]
    for n in range(1, commits + 1):
        with (dest / "HISTORY.txt").open("a") as f:
            f.write(f"change {n}\n")
        message = f"change {n}"
        if n == broken_at:
            source = (dest / UPDATE).read_text()
            if source.count(ADVANCE) != 1:
                raise ValueError(f"{UPDATE}: the step update's line is not there once ({ADVANCE.strip()!r})")
            (dest / UPDATE).write_text(source.replace(ADVANCE, ADVANCE.replace("+= 1", "+= 2")))
            message = f"change {n}: the step update advances seq_lens by two"
        _git(dest, "add", "-A")
        _git(dest, "commit", "--quiet", "-m", message)
        hashes.append(_git(dest, "rev-parse", "HEAD").strip())
    return hashes
