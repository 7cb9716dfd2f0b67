"""Graph modes on a device: host syncs, host-issued ops per draft step, replay vs eager time.

    python -m benchmarks.graph_modes [--device sim] [--repeat 30]

All figures come from one run on one decode batch (B = 16, K = 3), so they
compare with each other. On ``sim`` a replay re-executes the recorded ops from
Python, so its time shows the cost of the simulation, not a hardware speed-up;
the op counts are what an accelerator would launch from the host.
"""

from __future__ import annotations

import argparse
import statistics
import time

from rich.console import Console
from rich.table import Table
from torch.utils._python_dispatch import TorchDispatchMode

from benchmarks.propose_latency import BLOCK_SIZE, SEQ_LEN, VOCAB, decode_case
from devices import load_device
from mtp.proposer import STEP, MtpProposer
from sim.models.paged_attention import PagedKvCache
from sim.models.tiny import TinyConfig, TinyMtp
from sim.oracle.cases import to_batch

NUM_REQS, K = 16, 3


class _CountOps(TorchDispatchMode):
    """Counts aten ops issued from the host; a graph replay counts as one launch."""

    def __init__(self):
        super().__init__()
        self.n = self.launches = 0
        self.paused = False

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        self.n += not self.paused
        return func(*args, **(kwargs or {}))

    def around(self, replay):
        def counted(*a, **k):
            self.launches += 1
            self.paused = True
            try:
                return replay(*a, **k)
            finally:
                self.paused = False

        return counted


def build(device, mode: str, padded: bool):
    case = decode_case(NUM_REQS, K)
    tcfg = TinyConfig(vocab_size=VOCAB)
    blocks = NUM_REQS * ((SEQ_LEN + K) // BLOCK_SIZE + 1)
    cache = PagedKvCache(blocks, BLOCK_SIZE, tcfg.num_heads, tcfg.head_dim, device.torch_device)
    proposer = MtpProposer(case.config, TinyMtp(tcfg, cache).to(device.torch_device), device, mode=mode)
    batch, sampled = to_batch(case, device.torch_device, padded)
    proposer.propose(batch, sampled)  # captures the graphs in graph modes
    return proposer, batch, sampled


def ops_per_step(proposer: MtpProposer) -> tuple[int, int, int]:
    """(aten ops the host issues for one draft step, graph launches, ops inside the step's graph)."""
    size = proposer._size(STEP, NUM_REQS)
    proposer._set_step(2)
    graph = proposer.graphs.get((STEP, size))
    counter = _CountOps()
    if graph:
        graph[0].replay = counter.around(graph[0].replay)
    with counter:
        proposer._run(STEP, size, SEQ_LEN + 1)
    if graph:
        del graph[0].replay
    return counter.n, counter.launches, getattr(graph[0], "num_ops", 0) if graph else 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="sim")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    device = load_device(args.device)
    table = Table(
        "mode", "batch", "host syncs / call", "host ops / draft step", "ops in step graph", "median ms / call"
    )
    eager_ms = {}
    for padded in (True, False):
        for mode in ("eager", "piecewise", "full"):
            proposer, batch, sampled = build(device, mode, padded)
            with device.watch_host_syncs() as syncs:
                proposer.propose(batch, sampled)
            host_ops, launches, inside = ops_per_step(proposer)
            times = []
            for _ in range(args.repeat):
                device.synchronize()
                start = time.perf_counter()
                proposer.propose(batch, sampled)
                device.synchronize()
                times.append(time.perf_counter() - start)
            ms = statistics.median(times) * 1e3
            kind = "padded" if padded else "unpadded"
            eager_ms.setdefault(kind, ms)
            ratio = f"{ms:.2f} ({ms / eager_ms[kind]:.2f}x eager)"
            launch = f" + {launches} launch" if launches else ""
            table.add_row(mode, kind, str(syncs.total), f"{host_ops}{launch}", str(inside or "-"), ratio)
    Console().print(f"device: {device.describe()}; decode batch B={NUM_REQS}, K={K}")
    Console().print(table)


if __name__ == "__main__":
    main()
