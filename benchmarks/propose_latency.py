"""Propose-call latency on a device, for decode batches of B requests and K drafts.

    python -m benchmarks.propose_latency [--device sim] [--repeat 50] [--max-num-reqs 256]

Prints the median and the interquartile range per (mode, B, K), all measured
in one run so the figures compare with each other on a noisy machine. Beside
each, the same call with the first pass computing logits for every row of the
sample buffer (``max_num_reqs`` rows, as the eager path once did) and the ratio
of the two: what sampling only the batch's rows saves.
"""

from __future__ import annotations

import argparse
import statistics
import time

import numpy as np
import torch
from rich.console import Console
from rich.table import Table

from devices import load_device
from mtp.config import ProposerConfig
from mtp.proposer import MtpProposer
from sim.models.paged_attention import PagedKvCache
from sim.models.tiny import TinyConfig, TinyMtp
from sim.oracle.cases import BatchCase, RequestCase, to_batch

SEQ_LEN, BLOCK_SIZE, VOCAB, MAX_MODEL_LEN = 96, 16, 4096, 128


class AllRowsFirstLogits(MtpProposer):
    """The former eager first pass: logits for all ``max_num_reqs`` rows of the sample buffer."""

    def _first_sample(self, out: torch.Tensor, reqs: int) -> None:
        super()._first_sample(out, self.cfg.max_num_reqs)


def decode_case(num_reqs: int, k: int, max_num_reqs: int | None = None, seed: int = 0) -> BatchCase:
    """B decode requests at ``SEQ_LEN``; the proposer's buffers hold ``max_num_reqs`` (default: B) requests."""
    max_num_reqs = max_num_reqs or num_reqs
    rng = np.random.default_rng(seed)
    blocks_per_req = (SEQ_LEN + k) // BLOCK_SIZE + 1
    pool = rng.permutation(num_reqs * blocks_per_req).tolist()
    reqs = []
    for r in range(num_reqs):
        accepted = int(rng.integers(0, k + 1))
        reqs.append(
            RequestCase(
                tokens=rng.integers(0, VOCAB, size=k + 2).tolist(),
                num_computed=SEQ_LEN - k - 1,
                query_len=k + 1,
                num_drafts=k,
                sampled=rng.integers(0, VOCAB, size=accepted + 1).tolist() + [-1] * (k - accepted),
                discarded=False,
                blocks=pool[r * blocks_per_req : (r + 1) * blocks_per_req],
            )
        )
    cfg = ProposerConfig(k, VOCAB, BLOCK_SIZE, MAX_MODEL_LEN, max_num_reqs * (k + 1), max_num_reqs, 32)
    return BatchCase(cfg, reqs, seed)


def _proposer(device, case: BatchCase, cls):
    tcfg = TinyConfig(vocab_size=VOCAB)
    blocks = len(case.requests) * ((SEQ_LEN + case.config.num_spec_tokens) // BLOCK_SIZE + 1)
    cache = PagedKvCache(blocks, BLOCK_SIZE, tcfg.num_heads, tcfg.head_dim, device.torch_device)
    return cls(case.config, TinyMtp(tcfg, cache).to(device.torch_device), device)


def measure(device, num_reqs: int, k: int, padded: bool, repeat: int, max_num_reqs: int, classes) -> list[list[float]]:
    """Per class, ``repeat`` propose-call times; the classes take turns call by call, so noise hits all alike."""
    case = decode_case(num_reqs, k, max(max_num_reqs, num_reqs))
    proposers = [_proposer(device, case, cls) for cls in classes]
    batch, sampled = to_batch(case, device.torch_device, padded)
    times = [[] for _ in classes]
    for i in range(repeat + 5):
        for proposer, t in zip(proposers, times):
            device.synchronize()
            start = time.perf_counter()
            proposer.propose(batch, sampled)
            device.synchronize()
            if i >= 5:  # warm-up
                t.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="sim")
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument(
        "--max-num-reqs", type=int, default=256, help="the proposer's request buffers (vLLM's max_num_seqs)"
    )
    args = parser.parse_args()
    device = load_device(args.device)
    table = Table(
        "mode", "B", "K", "median ms", "IQR ms", "ms per request", "all-rows logits ms", "all-rows / batch rows"
    )
    for padded in (True, False):
        for num_reqs in (1, 16, 64):
            for k in (1, 3):
                t, old = measure(
                    device, num_reqs, k, padded, args.repeat, args.max_num_reqs, (MtpProposer, AllRowsFirstLogits)
                )
                q1, med, q3 = statistics.quantiles(t, n=4)
                old_med = statistics.median(old)
                mode = "padded" if padded else "unpadded"
                table.add_row(
                    mode,
                    str(num_reqs),
                    str(k),
                    f"{med * 1e3:.2f}",
                    f"{(q3 - q1) * 1e3:.2f}",
                    f"{med * 1e3 / num_reqs:.3f}",
                    f"{old_med * 1e3:.2f}",
                    f"{old_med / med:.2f}",
                )
    Console().print(
        f"device: {device.describe()}, torch threads: {torch.get_num_threads()}, max_num_reqs: {args.max_num_reqs}"
    )
    Console().print(table)


if __name__ == "__main__":
    main()
