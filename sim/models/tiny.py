"""Tiny deterministic models: a DeepSeek-MTP-style draft layer and a causal target.

Small enough to run thousands of times in a test session, built to be
sensitive: a wrong position (RoPE with a fast frequency and a sharp
softmax), a wrong hidden row, a wrong slot or a KV entry it must not see
changes the argmax with high probability (measured by
``python -m sim sensitivity``).
"""

from __future__ import annotations

import functools
from dataclasses import dataclass

import torch
from torch import nn

from mtp.model import AttentionMeta
from sim.models.paged_attention import PagedKvCache, paged_attention


@dataclass(frozen=True)
class TinyConfig:
    vocab_size: int = 96
    hidden_size: int = 32
    num_heads: int = 2
    head_dim: int = 16
    mlp_size: int = 64
    rope_base: float = 50.0
    attn_sharpness: float = 1.0  # multiplies 1/sqrt(d)
    recency: tuple[float, ...] = (2.0, 0.5)  # ALiBi slope per head: a local head and a wider one
    seed: int = 0
    mrope: bool = False  # rotary over M-RoPE's [3, N] rows (``mrope_rope``) instead of [N] positions
    eagle3: bool = False  # a ``combine_hidden_states`` layer folding the target's 3 auxiliary layers
    draft_model: bool = False  # a language model of its own: the hidden states handed in are ignored


def _rms(x: torch.Tensor, weight: torch.Tensor, eps: float = 1e-6) -> torch.Tensor:
    return torch.nn.functional.rms_norm(x, weight.shape, weight, eps)


@functools.cache
def _freqs(half: int, base: float, device: torch.device) -> torch.Tensor:
    """Rotary frequencies ``base ** (-i / half)``, computed once per shape and device."""
    return base ** (-torch.arange(half, device=device, dtype=torch.float32) / half)


def rope_angles(positions: torch.Tensor, half: int, base: float) -> torch.Tensor:
    """[N, half] rotary angles of [N] positions: position times ``base ** (-i / half)``."""
    return positions.to(torch.float32)[:, None] * _freqs(half, base, positions.device)[None, :]


def rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary embedding of [N, heads, d] at [N] positions."""
    half = x.shape[-1] // 2
    angles = rope_angles(positions.to(x.device), half, base)
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)


def mrope_rope(x: torch.Tensor, positions: torch.Tensor, base: float) -> torch.Tensor:
    """Rotary embedding of [N, heads, d] at M-RoPE's [3, N] rows (temporal, height, width).

    Frequency i rotates by row ``i % 3`` (interleaved sections), so every row
    drives fast and slow frequencies alike: a wrong value in any one row
    changes the attention as much as a wrong scalar position would.
    """
    half = x.shape[-1] // 2
    rows = positions.to(torch.float32)[torch.arange(half, device=x.device) % 3]  # [half, N]
    angles = rows.T * _freqs(half, base, x.device)[None, :]
    cos, sin = angles.cos()[:, None, :], angles.sin()[:, None, :]
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x1 * sin + x2 * cos], dim=-1).to(x.dtype)


class TinyMtp(nn.Module):
    """Embedding + RMSNorms, a projection of [embed; hidden], one decoder block
    (RoPE attention over a paged KV cache, MLP) and a shared head."""

    def __init__(self, cfg: TinyConfig, cache: PagedKvCache | None = None):
        super().__init__()
        self.cfg = cfg
        self.hidden_size, self.vocab_size = cfg.hidden_size, cfg.vocab_size
        g = torch.Generator().manual_seed(cfg.seed)
        h, a = cfg.hidden_size, cfg.num_heads * cfg.head_dim

        def w(*shape, scale=1.0):
            return nn.Parameter(torch.randn(*shape, generator=g) * scale / shape[-1] ** 0.5, requires_grad=False)

        self.embed = nn.Parameter(torch.randn(cfg.vocab_size, h, generator=g), requires_grad=False)
        self.enorm = nn.Parameter(torch.ones(h), requires_grad=False)
        self.hnorm = nn.Parameter(torch.ones(h), requires_grad=False)
        self.proj = w(h, 2 * h)
        self.attn_norm = nn.Parameter(torch.ones(h), requires_grad=False)
        self.wq, self.wk, self.wv = w(a, h, scale=2.0), w(a, h, scale=2.0), w(a, h)
        self.wo = w(h, a, scale=4.0)
        self.mlp_norm = nn.Parameter(torch.ones(h), requires_grad=False)
        self.w_up, self.w_down = w(cfg.mlp_size, h), w(h, cfg.mlp_size)
        self.head_norm = nn.Parameter(torch.ones(h), requires_grad=False)
        self.lm_head = w(cfg.vocab_size, h, scale=3.0)
        self.cache = cache
        self.scale = cfg.attn_sharpness / cfg.head_dim**0.5
        self.register_buffer("recency", torch.tensor(cfg.recency, dtype=torch.float32), persistent=False)
        if cfg.eagle3:  # drawn last, so the other weights do not depend on the method
            self.fc = w(h, 3 * h)

    # The pieces below are shared with the dense reference; only the attention differs.
    def block_input(self, input_ids: torch.Tensor, hidden_states: torch.Tensor) -> torch.Tensor:
        e = _rms(self.embed[input_ids.long()], self.enorm)
        h = torch.zeros_like(e) if self.cfg.draft_model else _rms(hidden_states, self.hnorm)
        return torch.cat([e, h], dim=-1) @ self.proj.T

    def combine_hidden_states(self, aux: torch.Tensor) -> torch.Tensor:
        """eagle3: the target's [N, 3H] auxiliary hidden states -> [N, H]."""
        if not self.cfg.eagle3:
            raise ValueError("combine_hidden_states: this model is not an eagle3 draft (TinyConfig.eagle3=False)")
        if aux.shape[-1] != 3 * self.hidden_size:
            raise ValueError(f"aux.shape={tuple(aux.shape)}: expected [N, {3 * self.hidden_size}]")
        return aux @ self.fc.T

    def qkv(self, x: torch.Tensor, positions: torch.Tensor):
        """Queries, keys, values of [N, H] rows at [N] positions (or [3, N] M-RoPE rows)."""
        n, heads, d = x.shape[0], self.cfg.num_heads, self.cfg.head_dim
        want = (3, n) if self.cfg.mrope else (n,)
        if tuple(positions.shape) != want:
            raise ValueError(f"positions.shape={tuple(positions.shape)}: expected {want} (mrope={self.cfg.mrope})")
        rotate = mrope_rope if self.cfg.mrope else rope
        y = _rms(x, self.attn_norm)
        qk = rotate(
            torch.cat([y @ self.wq.T, y @ self.wk.T], dim=-1).view(n, 2 * heads, d), positions, self.cfg.rope_base
        )
        return qk[:, :heads], qk[:, heads:], (y @ self.wv.T).view(n, heads, d)

    def block_output(self, x: torch.Tensor, attn_out: torch.Tensor) -> torch.Tensor:
        x = x + attn_out.reshape(x.shape[0], -1) @ self.wo.T
        return x + torch.nn.functional.gelu(_rms(x, self.mlp_norm) @ self.w_up.T) @ self.w_down.T

    def forward(self, input_ids, positions, hidden_states, attn: AttentionMeta) -> torch.Tensor:
        sp = attn.sequence_parallel  # shared-expert DP: positions and hidden states are this rank's chunk
        if sp is not None:
            positions, hidden_states = sp.gather(positions, dim=-1), sp.gather(hidden_states)
        x = self.block_input(input_ids, hidden_states)
        q, k, v = self.qkv(x, positions)
        if attn.kv_gather is None:
            self.cache.write(attn.slot_mapping, k, v)
        else:
            kv = attn.kv_gather(torch.stack([k, v], dim=1))  # K and V in one collective
            self.cache.write(attn.kv_gather(attn.slot_mapping), kv[:, 0], kv[:, 1])
        out = self.block_output(x, paged_attention(q, self.cache, attn, self.scale, self.recency))
        return out if sp is None else sp.shard(out)

    def forward_layers(self, input_ids, positions, hidden_states, layers) -> torch.Tensor:
        """``forward`` with the attention heads split over several attention layers in order, each
        layer a ``(cache, AttentionMeta)`` of its own: every layer writes the block's keys and values
        into its cache at its own slots, and its share of the heads attends over that cache with its
        own metadata (a draft whose layers sit in several attention groups). Given the same metadata
        over caches that hold the same, it computes exactly ``forward``; a layer given another
        layer's slots, lengths or table reads other keys, and its heads change the draft."""
        heads = self.cfg.num_heads
        if not 1 <= len(layers) <= heads:
            raise ValueError(f"{len(layers)} attention layers: expected 1 to {heads} (one head each at least)")
        x = self.block_input(input_ids, hidden_states)
        q, k, v = self.qkv(x, positions)
        bounds = [heads * i // len(layers) for i in range(len(layers) + 1)]
        outs = []
        for (cache, attn), lo, hi in zip(layers, bounds, bounds[1:]):
            cache.write(attn.slot_mapping, k, v)
            outs.append(paged_attention(q, cache, attn, self.scale, self.recency)[:, lo:hi])
        return self.block_output(x, torch.cat(outs, dim=1))

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        return self.head_input(hidden_states) @ self.lm_head.T

    def head_input(self, hidden_states: torch.Tensor) -> torch.Tensor:
        """What the lm head multiplies: the hidden state after the head's norm (an lm head split over
        ranks, e.g. vLLM's ``ParallelLMHead``, takes it from here)."""
        return _rms(hidden_states, self.head_norm)

    def compute_logits_shard(self, hidden_states: torch.Tensor, rank: int, size: int) -> torch.Tensor:
        """lm-head tensor parallel: this rank's slice of the vocabulary, [M, ceil(V / size)].

        The vocabulary is padded to a multiple of ``size``; padded columns hold -inf.
        """
        shard = -(-self.vocab_size // size)
        lo, hi = rank * shard, min((rank + 1) * shard, self.vocab_size)
        logits = _rms(hidden_states, self.head_norm) @ self.lm_head[lo:hi].T
        pad = torch.full((logits.shape[0], shard - (hi - lo)), float("-inf"), dtype=logits.dtype, device=logits.device)
        return torch.cat([logits, pad], dim=-1)


class TinyTarget(nn.Module):
    """A causal target: ``h[i] = tanh(E1[t_i] + E2[t_{i-1}] + P(i))``, greedy next token ``argmax(h[i] W)``.

    Row-wise (no attention), so a request's hidden states are bit-identical
    however the rows are batched, and recomputing them from scratch is cheap.
    """

    def __init__(self, cfg: TinyConfig):
        super().__init__()
        g = torch.Generator().manual_seed(cfg.seed + 1)
        h = cfg.hidden_size
        self.hidden_size, self.vocab_size = h, cfg.vocab_size
        self.e1 = torch.randn(cfg.vocab_size, h, generator=g)
        self.e2 = torch.randn(cfg.vocab_size, h, generator=g) * 0.5
        self.freqs = torch.rand(h, generator=g) * 2.0
        self.out = torch.randn(cfg.vocab_size, h, generator=g)
        a = torch.Generator().manual_seed(cfg.seed + 2)  # its own stream: the weights above stay as they were
        self.aux_embed = torch.randn(2, cfg.vocab_size, h, generator=a)
        self.aux_freqs = torch.rand(2, h, generator=a) * 2.0

    def hidden(self, tokens: torch.Tensor, prev_tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """[N] tokens, [N] previous tokens (any id at position 0), [N] positions -> [N, H]."""
        pos = torch.sin(positions.to(torch.float32)[:, None] * self.freqs[None, :])
        return torch.tanh(self.e1[tokens.long()] + self.e2[prev_tokens.long()] + pos)

    def aux_hidden(self, tokens: torch.Tensor, prev_tokens: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
        """eagle3's auxiliary hidden states: two lower layers and the last one, [N, 3H]."""
        pos = positions.to(torch.float32)[:, None]
        low = [torch.tanh(self.aux_embed[i][tokens.long()] + torch.sin(pos * self.aux_freqs[i])) for i in range(2)]
        return torch.cat([*low, self.hidden(tokens, prev_tokens, positions)], dim=-1)

    def greedy(self, hidden: torch.Tensor) -> torch.Tensor:
        return (hidden @ self.out.T).argmax(dim=-1)

    def sequence_hidden(self, tokens: list[int]) -> torch.Tensor:
        """Hidden states of a whole sequence, from scratch."""
        t = torch.tensor(tokens, dtype=torch.int64)
        prev = torch.cat([t[:1], t[:-1]])
        return self.hidden(t, prev, torch.arange(len(tokens)))

    def sequence_aux_hidden(self, tokens: list[int]) -> torch.Tensor:
        """Auxiliary hidden states of a whole sequence, from scratch (eagle3)."""
        t = torch.tensor(tokens, dtype=torch.int64)
        prev = torch.cat([t[:1], t[:-1]])
        return self.aux_hidden(t, prev, torch.arange(len(tokens)))
