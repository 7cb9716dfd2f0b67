"""How often a single wrong input changes the tiny model's draft.

The harness can only see a bug through the drafts if the model is
sensitive. For random contexts this perturbs one thing the proposer could get
wrong and counts how often draft 1 changes:

- position:  the drafting row's position off by one (RoPE, and its K);
- hidden row: the drafting row gets the previous row's target hidden state;
- KV entry:  one of the three latest K/V entries replaced by another position's
             (a write to the wrong slot leaves a stale entry where the read goes);
- seq_len:   the drafting row also sees one extra stale KV entry.
"""

from __future__ import annotations

import numpy as np
import torch

from sim.models.tiny import TinyConfig, TinyMtp, TinyTarget
from sim.oracle.reference_drafts import dense_attention

PERTURBATIONS = ("position", "hidden row", "KV entry", "seq_len")


@torch.no_grad()
def _draft(model, x, positions, kv_edit=None, extra_kv=None):
    """Draft 1 at the last row; ``kv_edit=(i, j)`` puts row j's K/V at i,
    ``extra_kv`` appends one K/V entry the last row also sees."""
    q, k, v = model.qkv(x, positions)
    if kv_edit is not None:
        i, j = kv_edit
        k, v = k.clone(), v.clone()
        k[i], v[i] = k[j], v[j]
    if extra_kv is not None:
        k, v = torch.cat([k, extra_kv[0]]), torch.cat([v, extra_kv[1]])
    sees_up_to = torch.tensor([k.shape[0] - 1])
    out = model.block_output(x[-1:], dense_attention(q[-1:], k, v, sees_up_to, model.scale, model.recency))
    return int(model.compute_logits(out)[0].argmax())


def measure(trials: int = 300, seed: int = 0, cfg: TinyConfig | None = None) -> dict[str, float]:
    """Fraction of trials in which each perturbation changes draft 1."""
    cfg = cfg or TinyConfig()
    model = TinyMtp(cfg)
    target = TinyTarget(cfg)
    rng = np.random.default_rng(seed)
    changed = dict.fromkeys(PERTURBATIONS, 0)
    for _ in range(trials):
        n = int(rng.integers(4, 64))
        tokens = rng.integers(0, cfg.vocab_size, size=n + 1).tolist()
        hidden = target.sequence_hidden(tokens[:-1])
        positions = torch.arange(n)
        x = model.block_input(torch.tensor(tokens[1:]), hidden)
        base = _draft(model, x, positions)
        moved = positions.clone()
        moved[-1] += 1
        swapped = hidden.clone()
        swapped[-1] = hidden[-2]
        i = int(rng.integers(n - 3, n))
        j = int(rng.choice([p for p in range(n) if p != i]))
        _, k_stale, v_stale = model.qkv(model.block_input(torch.tensor([tokens[0]]), hidden[:1]), positions[-1:] + 1)
        results = {
            "position": _draft(model, x, moved),
            "hidden row": _draft(model, model.block_input(torch.tensor(tokens[1:]), swapped), positions),
            "KV entry": _draft(model, x, positions, kv_edit=(i, j)),
            "seq_len": _draft(model, x, positions, extra_kv=(k_stale, v_stale)),
        }
        for name, tok in results.items():
            changed[name] += tok != base
    return {name: n / trials for name, n in changed.items()}
