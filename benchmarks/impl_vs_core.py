"""Propose-call time of the core (MtpProposer) against other implementations under test, on CPU.

    python -m benchmarks.impl_vs_core --impl vllm_ascend [--repeat 30]   (in that implementation's tox env)
    python -m benchmarks.impl_vs_core --impl vllm --impl vllm_mrv2       (V1 and MRV2 side by side, tox -e vllm)
    python -m benchmarks.impl_vs_core --impl vllm_ascend --impl vllm_ascend_mrv2   (vllm-ascend V1 and MRV2)

All run the same tiny MTP model and paged cache on the same decode batches
(B = 1, 16, 64 requests, K = 1, 3 drafts, padded mode), call by call in turn,
so the ratio compares like with like on a noisy machine. An adapter runs its
CPU path (vLLM's and vllm-ascend's Triton kernels in the interpreter): read
the ratio as harness overhead, not accelerator speed.
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
    parser.add_argument(
        "--impl", action="append", required=True, help="a registered implementation (repeat for several): vllm, ..."
    )
    parser.add_argument("--repeat", type=int, default=30)
    args = parser.parse_args()
    impls = [load_implementation(name) for name in args.impl]
    device = load_device("sim")
    columns = [c for impl in impls for c in (f"{impl.name} median ms", f"{impl.name} / core")]
    table = Table("B", "K", "core median ms", *columns)
    for num_reqs in (1, 16, 64):
        for k in (1, 3):
            classes = (MtpProposer, *(impl.proposer_cls for impl in impls))
            core, *others = (
                statistics.median(t) for t in measure(device, num_reqs, k, True, args.repeat, num_reqs, classes)
            )
            cells = [c for other in others for c in (f"{other * 1e3:.2f}", f"{other / core:.2f}x")]
            table.add_row(str(num_reqs), str(k), f"{core * 1e3:.2f}", *cells)
    Console().print(
        f"device: {device.describe()}, torch threads: {torch.get_num_threads()}, "
        f"TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')}"
    )
    Console().print(table)


if __name__ == "__main__":
    main()
