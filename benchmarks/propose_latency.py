"""Propose-call latency on a device, for decode batches of B requests and K drafts.

    python -m benchmarks.propose_latency [--device sim] [--repeat 50]

Prints the median and the interquartile range per (mode, B, K), all measured
in one run so the figures compare with each other on a noisy machine.
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

SEQ_LEN, BLOCK_SIZE, VOCAB, MAX_MODEL_LEN = 96, 16, 96, 128


def decode_case(num_reqs: int, k: int, seed: int = 0) -> BatchCase:
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
    cfg = ProposerConfig(k, VOCAB, BLOCK_SIZE, MAX_MODEL_LEN, num_reqs * (k + 1), num_reqs, 32)
    return BatchCase(cfg, reqs, seed)


def measure(device, num_reqs: int, k: int, padded: bool, repeat: int) -> list[float]:
    case = decode_case(num_reqs, k)
    tcfg = TinyConfig(vocab_size=VOCAB)
    cache = PagedKvCache(
        num_reqs * ((SEQ_LEN + k) // BLOCK_SIZE + 1), BLOCK_SIZE, tcfg.num_heads, tcfg.head_dim, device.torch_device
    )
    proposer = MtpProposer(case.config, TinyMtp(tcfg, cache).to(device.torch_device), device)
    batch, sampled = to_batch(case, device.torch_device, padded)
    times = []
    for i in range(repeat + 5):
        device.synchronize()
        start = time.perf_counter()
        proposer.propose(batch, sampled)
        device.synchronize()
        if i >= 5:  # warm-up
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="sim")
    parser.add_argument("--repeat", type=int, default=50)
    args = parser.parse_args()
    device = load_device(args.device)
    table = Table("mode", "B", "K", "median ms", "IQR ms", "ms per request")
    for padded in (True, False):
        for num_reqs in (1, 16, 64):
            for k in (1, 3):
                t = measure(device, num_reqs, k, padded, args.repeat)
                q1, med, q3 = statistics.quantiles(t, n=4)
                mode = "padded" if padded else "unpadded"
                table.add_row(
                    mode,
                    str(num_reqs),
                    str(k),
                    f"{med * 1e3:.2f}",
                    f"{(q3 - q1) * 1e3:.2f}",
                    f"{med * 1e3 / num_reqs:.3f}",
                )
    Console().print(f"device: {device.describe()}, torch threads: {torch.get_num_threads()}")
    Console().print(table)


if __name__ == "__main__":
    main()
