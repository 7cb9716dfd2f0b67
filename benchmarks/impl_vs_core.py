"""Propose-call time of the core (MtpProposer) against another implementation under test, on CPU.

    python -m benchmarks.impl_vs_core --impl vllm_ascend [--repeat 30]   (in that implementation's tox env)

Both run the same tiny MTP model and paged cache on the same decode batches
(B = 1, 16, 64 requests, K = 1, 3 drafts, padded mode), call by call in turn,
so the ratio compares like with like on a noisy machine. An adapter runs its
CPU path (vLLM's Triton kernels in the interpreter, vllm-ascend's torch
fallback): read the ratio as harness overhead, not accelerator speed.
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

import torch  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks.propose_latency import measure  # noqa: E402
from devices import load_device  # noqa: E402
from mtp.proposer import MtpProposer  # noqa: E402
from sim.impls import load_implementation  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--impl", required=True, help="a registered implementation: vllm, vllm_ascend, ...")
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    impl = load_implementation(args.impl)
    device = load_device("sim")
    table = Table("B", "K", "core median ms", f"{impl.name} median ms", f"{impl.name} / core")
    for num_reqs in (1, 16, 64):
        for k in (1, 3):
            core, other = (
                statistics.median(t)
                for t in measure(device, num_reqs, k, True, args.repeat, num_reqs, (MtpProposer, impl.proposer_cls))
            )
            table.add_row(str(num_reqs), str(k), f"{core * 1e3:.2f}", f"{other * 1e3:.2f}", f"{other / core:.2f}x")
    Console().print(
        f"device: {device.describe()}, torch threads: {torch.get_num_threads()}, "
        f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')}"
    )
    Console().print(table)


if __name__ == "__main__":
    main()
