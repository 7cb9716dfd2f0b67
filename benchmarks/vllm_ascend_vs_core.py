"""Propose-call time of the core (MtpProposer) against vllm-ascend 0.23.0's AscendEagleProposer, on CPU.

    python -m benchmarks.vllm_ascend_vs_core [--repeat 30]   (needs vllm-ascend: tox -e vllm_ascend, or its venv)

Both run the same tiny MTP model and paged cache on the same decode batches
(B = 1, 16, 64 requests, K = 1, 3 drafts, padded mode), side by side in one
run, so the ratio compares like with like on a noisy machine. vllm-ascend runs
its torch path (``prepare_inputs_padded``'s torch fallback, the default of
``AscendProposer``); read the ratio as "harness overhead", not NPU speed.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks.propose_latency import BLOCK_SIZE, SEQ_LEN, VOCAB, decode_case  # noqa: E402
from devices import load_device  # noqa: E402
from mtp.proposer import MtpProposer  # noqa: E402
from sim.models.paged_attention import PagedKvCache  # noqa: E402
from sim.models.tiny import TinyConfig, TinyMtp  # noqa: E402
from sim.oracle.cases import to_batch  # noqa: E402


def measure(proposer_cls, device, num_reqs: int, k: int, repeat: int) -> list[float]:
    case = decode_case(num_reqs, k)
    tcfg = TinyConfig(vocab_size=VOCAB)
    blocks = num_reqs * ((SEQ_LEN + k) // BLOCK_SIZE + 1)
    model = TinyMtp(tcfg, PagedKvCache(blocks, BLOCK_SIZE, tcfg.num_heads, tcfg.head_dim, device.torch_device))
    proposer = proposer_cls(case.config, model, device)
    batch, sampled = to_batch(case, device.torch_device, padded=True)
    times = []
    for i in range(repeat + 3):
        start = time.perf_counter()
        proposer.propose(batch, sampled)
        if i >= 3:  # warm-up
            times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    from sim.impls.vllm_ascend.adapter import AscendProposer  # imports vllm-ascend lazily, on first use

    device = load_device("sim")
    table = Table("B", "K", "core median ms", "vllm-ascend median ms", "vllm-ascend / core")
    for num_reqs in (1, 16, 64):
        for k in (1, 3):
            core = statistics.median(measure(MtpProposer, device, num_reqs, k, args.repeat))
            vllm = statistics.median(measure(AscendProposer, device, num_reqs, k, args.repeat))
            table.add_row(str(num_reqs), str(k), f"{core * 1e3:.2f}", f"{vllm * 1e3:.2f}", f"{vllm / core:.2f}x")
    console = Console()
    console.print(
        f"device: {device.describe()}, torch threads: {torch.get_num_threads()}, "
        f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')}"
    )
    console.print(table)


if __name__ == "__main__":
    main()
