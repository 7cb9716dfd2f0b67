"""Drafts compared under a known KV defect: per run, how many the gate compares and how many are undefined.

    python -m benchmarks.defect_drafts [--defect not-lowered|plus-one] [--seeds 0..19] [--unpadded] [--zero-cache]
    python -m benchmarks.defect_drafts --impl vllm_ascend        (in that implementation's tox env: its RULES)

Serves ``default_scenario(seed)`` (padded unless ``--unpadded``) with the core carrying the defect
(``tests/meta/broken_ops.py``: ``PaddedSeqLensNotLowered`` or ``SlotPlusOne``) under the rules that model
it, or with ``--impl`` that implementation under its own ``RULES``, and prints per run the drafts
compared, those compared at draft 1 (all that padded runs compared when ``Rules.drafts_defined`` gave 1
under ``padded-seq-lens-not-lowered``), near ties skipped, drafts undefined (they read a key no rule
defines: a NaN slot of the poisoned cache, the stale last row), wrong drafts (every run must have none)
and other mismatches (the broken core's ``seq_len_bound``, capped at max_model_len where the rules' "mask"
overflow lets an unlowered seq_len pass it: metadata only).
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")

from rich.console import Console  # noqa: E402
from rich.table import Table  # noqa: E402

from devices import load_device  # noqa: E402
from sim.impls import load_implementation  # noqa: E402
from sim.oracle.rules import Rules  # noqa: E402
from sim.serving.run import run_scenario  # noqa: E402
from sim.serving.scenario import default_scenario  # noqa: E402
from tests.meta.broken_ops import PaddedSeqLensNotLowered, SlotPlusOne  # noqa: E402

DEFECTS = {
    "not-lowered": (PaddedSeqLensNotLowered, Rules(padded_seq_lens_lowered=False)),
    "plus-one": (SlotPlusOne, Rules(slots_from_block_table=False)),
}


def _seeds(text: str) -> list[int]:
    lo, _, hi = text.partition("..")
    return list(range(int(lo), int(hi or lo) + 1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--defect", choices=sorted(DEFECTS), default="not-lowered")
    parser.add_argument("--impl", help="an implementation under test, under its own RULES, instead of the broken core")
    parser.add_argument("--seeds", type=_seeds, default=_seeds("0..19"), help="LO..HI, inclusive")
    parser.add_argument("--unpadded", action="store_true")
    parser.add_argument("--zero-cache", action="store_true", help="a cache of stale zeros instead of NaN")
    args = parser.parse_args()
    device = load_device("sim")
    if args.impl:
        impl = load_implementation(args.impl)
        label, run = impl.name, {"ops": impl.ops, "proposer_cls": impl.proposer_cls, "rules": impl.rules}
    else:
        ops, rules = DEFECTS[args.defect]
        label, run = f"core with {ops.__name__}", {"ops": ops(), "rules": rules}
    columns = ("proposals", "compared", "at draft 1", "near ties", "undefined", "wrong drafts", "other")
    table = Table("seed", "iterations", *columns)
    total = [0] * len(columns)
    for seed in args.seeds:
        scenario = default_scenario(seed, padded=not args.unpadded)
        try:
            report = run_scenario(scenario, device, stop_at_first_mismatch=False, poison_kv=not args.zero_cache, **run)
        except IndexError as exc:  # SlotPlusOne from the cache's last block writes past it
            table.add_row(str(seed), f"crashed: {exc}")
            continue
        wrong = sum(m.what.startswith("draft") for m in report.mismatches)
        row = [
            report.proposals,
            report.drafts_compared,
            report.drafts_compared_at[1],
            report.drafts_ambiguous,
            report.drafts_undefined,
            wrong,
            len(report.mismatches) - wrong,
        ]
        total = [t + n for t, n in zip(total, row)]
        table.add_row(str(seed), str(report.iterations), *map(str, row))
    table.add_row("all", "", *map(str, total))
    mode = "unpadded" if args.unpadded else "padded"
    cache = "stale zeros" if args.zero_cache else "NaN"
    console = Console(width=150)
    console.print(f"{label}, {mode}, cache {cache}, K {default_scenario(0).num_spec_tokens}, rules {run['rules']}")
    console.print(table)


if __name__ == "__main__":
    main()
