"""Propose-call time of vllm-ascend's proposer with and without the simulator's early-read check.

    python -m benchmarks.early_reads_overhead [--repeat 20]   (tox -e vllm_ascend's env)

The check (``devices.sim.early_reads``, on around each call by ``sim.impls.kit.ascend.early_copies``)
follows every torch call of the propose call in a ``TorchFunctionMode``. ``Unchecked`` is the same
adapter with it off. Both run the same decode batches (B = 1, 16, 64, K = 1, 3, padded), call by
call in turn (``benchmarks.propose_latency.measure``), so the ratio compares like with like.
"""

from __future__ import annotations

import argparse
import os
import statistics

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from benchmarks.propose_latency import measure  # noqa: E402
from devices import load_device  # noqa: E402
from sim.impls import load_implementation  # noqa: E402
from sim.impls.kit.eager_adapter import EagerAdapter  # noqa: E402


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args()
    checked = load_implementation("vllm_ascend").proposer_cls

    class Unchecked(checked):
        propose = EagerAdapter.propose  # the template alone: no early-read check

    device = load_device("sim")
    table = Table("B", "K", "checked median ms", "unchecked median ms", "checked / unchecked")
    for num_reqs in (1, 16, 64):
        for k in (1, 3):
            on, off = (
                statistics.median(t)
                for t in measure(device, num_reqs, k, True, args.repeat, num_reqs, (checked, Unchecked))
            )
            table.add_row(str(num_reqs), str(k), f"{on * 1e3:.2f}", f"{off * 1e3:.2f}", f"{on / off:.2f}x")
    Console().print(f"device: {device.describe()}, TRITON_INTERPRET={os.environ.get('TRITON_INTERPRET')}")
    Console().print(table)


if __name__ == "__main__":
    main()
