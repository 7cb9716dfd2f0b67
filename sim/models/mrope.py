"""M-RoPE positions of a simulated multimodal request, from its prompt alone.

A prompt long enough holds one image of ``grid_h x grid_w`` patches after a
few text tokens, as Qwen2-VL lays them out: the image's tokens share the
temporal row of its first token and spread over the height and width rows;
text after the image resumes at ``start + max(grid_h, grid_w)``, so its three
rows equal ``position + delta`` with ``delta < 0``. Every token after the
prompt (outputs and drafts) is text. The prompt always ends with text, so the
row a request drafts from is text too.
"""

from __future__ import annotations

MIN_IMAGE_PROMPT = 8  # shorter prompts are text only


def image_grid(prompt_len: int, seed: int) -> tuple[int, int, int]:
    """(start, grid_h, grid_w) of the prompt's image; (0, 0, 0) for none."""
    if prompt_len < MIN_IMAGE_PROMPT:
        return 0, 0, 0
    start = 1 + seed % 3
    room = prompt_len - start - 1  # at least one text token after the image
    grid_w = 2 + seed % 2
    grid_h = max(1, min(room // grid_w, 4 + seed % 3))
    return start, grid_h, grid_w


def mrope_rows(prompt_len: int, seed: int, positions: range | list[int]) -> list[list[int]]:
    """[3][n]: the (temporal, height, width) rows at the given sequence positions."""
    start, gh, gw = image_grid(prompt_len, seed)
    size = gh * gw
    rows: list[list[int]] = [[], [], []]
    for p in positions:
        if p < start or size == 0:
            t = h = w = p
        elif p < start + size:
            i = p - start
            t, h, w = start, start + i // gw, start + i % gw
        else:
            t = h = w = p - size + max(gh, gw)
        for row, value in zip(rows, (t, h, w)):
            row.append(value)
    return rows
