"""Checks over several propose calls in a row on one proposer.

A single-call property starts every proposer fresh, so state that one call
leaves in a persistent buffer (a stale slot, a row of an earlier, larger
batch, a table column of a wider one) and a result the caller holds while a
later call overwrites it both go unseen there. These checks run a
``CallSequence`` (tests/strategies/sequences.py) through one proposer and hold
each call to what it would be as the proposer's first:

- its per-step metadata (the trace) equals the from-scratch reference for
  that batch alone, rows run at the smallest captured size, padding inert;
- the last call's drafts (that call carries every earlier call's state) equal
  those of a fresh proposer given the same batch on the same KV cache contents
  (the cache is reset to the same seeded values before each call, so only the
  proposer's own state can make them differ);
- the tensors it returned still hold their values after every later call.

The check takes the proposer class (and the ops it runs with), so the same
check runs on ``MtpProposer`` (it must pass) and on broken variants
(tests/meta/broken_proposers.py; it must fail).
"""

from __future__ import annotations

import torch

from sim.models.paged_attention import PagedKvCache
from sim.models.tiny import TinyConfig, TinyMtp
from sim.oracle.cases import to_batch
from sim.oracle.compare import compare_trace
from tests.strategies.sequences import CallSequence


def _num_blocks(seq: CallSequence) -> int:
    return max(b for call in seq.calls for r in call.case.requests for b in r.blocks) + 1


def _model(seq: CallSequence, device) -> TinyMtp:
    cfg = seq.config
    tiny = TinyConfig(vocab_size=cfg.vocab_size, hidden_size=cfg.hidden_size, seed=seq.model_seed)
    cache = PagedKvCache(_num_blocks(seq), cfg.block_size, tiny.num_heads, tiny.head_dim, device.torch_device)
    return TinyMtp(tiny, cache).to(device.torch_device)


def _reset_cache(model: TinyMtp, seed: int) -> None:
    """Seeded values in every slot: context KV the batch attends to, the same for both proposers."""
    gen = torch.Generator().manual_seed(seed)
    cache = model.cache
    cache.k.copy_(torch.randn(cache.k.shape, generator=gen))
    cache.v.copy_(torch.randn(cache.v.shape, generator=gen))


def _where(seq: CallSequence, i: int) -> str:
    call = seq.calls[i]
    earlier = [(len(c.case.requests), "padded" if c.padded else "unpadded") for c in seq.calls[:i]]
    return (
        f"call {i} of a sequence in {seq.mode} mode, sizes {seq.capture_sizes} (earlier calls: requests, mode = {earlier})\n"
        f"replay: {call.case.replay_text()} padded={call.padded}"
    )


def check_calls_in_sequence(proposer_cls, seq: CallSequence, device, ops=None) -> None:
    """Every call of ``seq`` on one proposer equals the reference and a fresh
    proposer's first call, and what each returned is unchanged after the last."""
    cfg = seq.config
    model = _model(seq, device)
    proposer = proposer_cls(cfg, model, device, ops=ops, mode=seq.mode, capture_sizes=seq.capture_sizes)
    proposer.record(True)
    fresh_model = _model(seq, device)
    held = []
    for i, call in enumerate(seq.calls):
        batch, sampled = to_batch(call.case, device.torch_device, call.padded)
        _reset_cache(model, seed=i)
        got = proposer.propose(batch, sampled)
        held.append((got, got.clone()))
        captured = proposer.captured_sizes()
        problems = compare_trace(i, call.case, call.padded, proposer.trace, captured)
        if problems:
            raise AssertionError("\n  ".join(str(m) for m in problems[:6]) + "\n" + _where(seq, i))
        if i < len(seq.calls) - 1:
            continue  # the last call carries every earlier call's state; one fresh proposer per sequence
        _reset_cache(fresh_model, seed=i)
        fresh = proposer_cls(cfg, fresh_model, device, ops=ops, mode=seq.mode, capture_sizes=seq.capture_sizes)
        want = fresh.propose(batch, sampled)
        if not torch.equal(got, want):
            raise AssertionError(f"drafts {got.tolist()}, a fresh proposer drafts {want.tolist()}\n{_where(seq, i)}")
    for i, (got, then) in enumerate(held):
        if not torch.equal(got, then):
            raise AssertionError(
                f"drafts returned by call {i} changed after {len(held) - 1 - i} later calls: "
                f"{then.tolist()} became {got.tolist()}\n{_where(seq, i)}"
            )
