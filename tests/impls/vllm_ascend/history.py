"""A synthetic vllm-ascend history for the bisect's tests: a checkout's sources, then commits on top,
one of which carries a regression (vllm-ascend's own step update advancing ``seq_lens`` by two), one
cannot be imported (a syntax error the next commit repairs) and one pairs with a vLLM no closure exists
for (its tag file, restored by the next commit)."""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from sim.impls.kit.ascend.checkout import TAG_FILE

UPDATE = Path("vllm_ascend/spec_decode/llm_base_proposer.py")
ADVANCE = "        common_attn_metadata.seq_lens[:batch_size] += 1\n"  # the device lengths, once per step
SKIPPED = ("tests", "docs", "examples", "benchmarks", "_build_info.py", "*.egg-info", "__pycache__", ".git")
UNPAIRED_TAG = "v9.9.9"  # a vLLM release the harness has no closure for
IDENTITY = ["-c", "user.name=mtp-harness", "-c", "user.email=mtp-harness@localhost"]


# Fixed dates: the same sources give the same hashes, so git bisect's choices (its skips' included) replay.
DATES = {"GIT_AUTHOR_DATE": "2026-01-01T00:00:00Z", "GIT_COMMITTER_DATE": "2026-01-01T00:00:00Z"}


def _git(repo: Path, *args: str) -> str:
    cmd = ["git", "-C", str(repo), *IDENTITY, *args]
    return subprocess.run(cmd, check=True, capture_output=True, text=True, env={**os.environ, **DATES}).stdout


def build(src: Path, dest: Path, commits: int, broken_at: int | None, unimportable_at: int | None = None,
          unpaired_at: int | None = None) -> list[str]:  # fmt: skip
    """``src`` (a vllm-ascend tree) as the first commit of a new repository ``dest``, then ``commits``
    commits: the one numbered ``broken_at`` (1-based) breaks the step update, ``unimportable_at`` cannot
    be imported and ``unpaired_at`` names ``UNPAIRED_TAG`` (each only that commit); the hashes, oldest first."""
    shutil.copytree(src, dest, ignore=shutil.ignore_patterns(*SKIPPED))
    _git(dest, "init", "--quiet", "--initial-branch=main")
    _git(dest, "add", "-A")
    _git(dest, "commit", "--quiet", "-m", "the released sources")
    hashes = [_git(dest, "rev-parse", "HEAD").strip()]
    kept: dict[Path, str] = {}  # a file a commit broke -> its text, restored by the next commit
    for n in range(1, commits + 1):
        with (dest / "HISTORY.txt").open("a") as f:
            f.write(f"change {n}\n")
        message = f"change {n}"
        for at, name, text, why in (
            (unimportable_at, UPDATE, ")\n", "cannot be imported"),
            (unpaired_at, Path(TAG_FILE), UNPAIRED_TAG + "\n", f"pairs with vLLM {UNPAIRED_TAG}"),
        ):
            if n == at:
                kept[name] = (dest / name).read_text()
                (dest / name).write_text(kept[name] + text if name == UPDATE else text)
                message = f"change {n}: {why}"
            elif at is not None and n == at + 1:
                (dest / name).write_text(kept.pop(name))
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
