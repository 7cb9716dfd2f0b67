"""Prefill context parallel: cases per second at P ranks, and time from a killed rank to the error.

    python -m benchmarks.pcp [--device sim] [--cases 10]

Each case is a serving scenario run on P gloo ranks and compared with one
rank (which is itself checked against the reference), as tests/properties/test_pcp.py
does; the kill is a SIGKILL sent to rank 1 in the middle of a case.
"""

from __future__ import annotations

import argparse
import os
import signal
import threading
import time
from dataclasses import asdict

from rich.console import Console
from rich.table import Table

from devices import load_device
from sim.ranks.pcp import PcpCase, PcpPool, check_pcp
from sim.ranks.pool import RankFailure
from sim.serving.scenario import default_scenario


def cases_per_second(device, size: int, cases: int) -> float:
    pool = PcpPool(size, device.name)
    try:
        check_pcp(default_scenario(seed=99, num_requests=3), pool, device)  # start-up, not timed
        start = time.perf_counter()
        for seed in range(cases):
            problems = check_pcp(default_scenario(seed=seed, num_requests=3), pool, device)
            assert not problems, problems
        return cases / (time.perf_counter() - start)
    finally:
        pool.close()


def kill_to_error_s(device) -> float:
    pool = PcpPool(2, device.name)
    try:
        scenario = default_scenario(num_requests=24)
        pool.run(PcpCase(asdict(scenario)))  # warm
        outcome = {}

        def run():
            try:
                pool.run(PcpCase(asdict(scenario)))
            except RankFailure as exc:
                outcome["at"], outcome["error"] = time.perf_counter(), str(exc)

        thread = threading.Thread(target=run)
        thread.start()
        time.sleep(1.0)
        killed = time.perf_counter()
        os.kill(pool.procs[1].pid, signal.SIGKILL)
        thread.join()
        if "at" not in outcome:
            raise RuntimeError("the case finished before the kill: use a longer scenario")
        Console().print(f"reported: {outcome['error'].splitlines()[0]}")
        return outcome["at"] - killed
    finally:
        pool.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--device", default="sim")
    parser.add_argument("--cases", type=int, default=10)
    args = parser.parse_args()
    device = load_device(args.device)
    table = Table("measure", "value")
    for size in (2, 4):
        table.add_row(f"cases per second, P = {size}", f"{cases_per_second(device, size, args.cases):.2f}")
    table.add_row("killed rank -> error", f"{kill_to_error_s(device):.2f} s")
    Console().print(table)


if __name__ == "__main__":
    main()
