"""vllm-ascend's rejection sampler broken, for ``test_rejection_sampler.py``'s catch tests and the
whole-gate runs of ``broken_gate``.

Each is ``breaking(rejection_sample) -> broken`` (the module function the runner's sampler calls),
or, for a kernel, applied to the session (``monkeypatch``) as an edit of the kernel file
(``tests.impls.fixes.use_edited_module``):

- ``keeps_the_first_mismatch``: a greedy request keeps its first draft the target disagrees with.
- ``bonus_after_a_rejection``: a random request that rejected a draft gets the bonus token after its
  recovered one.
- ``accepts_every_draft``: every random draft kept, whatever the target's probability of it.
- ``greedy_lanes_past_the_batch``: the greedy kernel's lane mask one request too wide, so a program
  whose lanes run past the batch loads the count past it and writes a row past the output.
"""

from __future__ import annotations

import functools

import torch

PLACEHOLDER = -1


def _rows(args, kwargs):
    names = ("draft_token_ids", "num_draft_tokens", "max_spec_len", "cu_num_draft_tokens")
    given = dict(zip(names, args)) | {k: v for k, v in kwargs.items() if k in names}
    draft, counts = given["draft_token_ids"].tolist(), given["num_draft_tokens"]
    starts = [sum(counts[:r]) for r in range(len(counts))]
    return [draft[s : s + c] for s, c in zip(starts, counts)]


def _temperature(args, kwargs) -> list[float]:
    """Each request's temperature (vLLM hands none where every request is greedy: zeros then)."""
    metadata = kwargs.get("sampling_metadata", args[7] if len(args) > 7 else None)
    if metadata.temperature is None:
        return [0.0] * len(_rows(args, kwargs))
    return metadata.temperature.tolist()


def keeps_the_first_mismatch(original):
    @functools.wraps(original)
    def broken(*args, **kwargs):
        out = original(*args, **kwargs)
        for r, (drafts, t) in enumerate(zip(_rows(args, kwargs), _temperature(args, kwargs))):
            wrong = next((i for i, d in enumerate(drafts) if int(out[r, i]) != d), None)
            if t == 0 and wrong is not None:
                out[r, wrong] = drafts[wrong]
        return out

    return broken


def _each_random_row(original, edit):
    """``rejection_sample`` with ``edit(row, drafts)`` applied to each random request's output row."""

    @functools.wraps(original)
    def broken(*args, **kwargs):
        out = original(*args, **kwargs)
        for r, (drafts, t) in enumerate(zip(_rows(args, kwargs), _temperature(args, kwargs))):
            if t != 0:
                edit(out[r], drafts)
        return out

    return broken


def _bonus_after_the_last(row, drafts) -> None:
    n = int((row != PLACEHOLDER).sum())
    if n <= len(drafts):  # a draft was rejected
        row[n] = row[n - 1]


def _every_draft_kept(row, drafts) -> None:
    row[: len(drafts)] = torch.tensor(drafts, dtype=row.dtype)


def bonus_after_a_rejection(original):
    return _each_random_row(original, _bonus_after_the_last)


def accepts_every_draft(original):
    return _each_random_row(original, _every_draft_kept)


def greedy_lanes_past_the_batch(monkeypatch) -> None:
    from sim.impls.kit.ascend.importing import import_ascend
    from tests.impls.fixes import use_edited_module
    from tests.impls.vllm_ascend.defect_fixes import KERNELS, SAMPLER

    pattern = r"(?s)(def rejection_greedy_sample_triton\(.*?)mask = offset < vec_len"
    use_edited_module(
        monkeypatch, import_ascend(KERNELS), import_ascend(SAMPLER), pattern, r"\1mask = offset < vec_len + 1"
    )
