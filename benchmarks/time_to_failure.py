"""How fast the gate fails: seconds from start to the first failing test, per broken variant.

    python -m benchmarks.time_to_failure [--impl vllm_ascend|vllm_ascend_mrv2] [--only NAME ...] [-- PYTEST ARGS]

Runs the gate as ``tox -e sim`` does (``-n auto --dist loadgroup``, the ``ci``
profile), once per deliberately broken core variant (``tests/meta/broken_ops.py``,
``tests/meta/broken_proposers.py``, ``tests/meta/broken_paths.py``, plugged in by
``tests/meta/broken_gate.py``), per broken PCP proposer (``tests/meta/broken_pcp.py``)
and per broken TP proposer (``tests/meta/broken_tp.py``, ``tests/meta/broken_sedp.py``), with ``-x``; prints the wall
time to the first failure of each, the median and the worst. Worker start-up
is included, as a developer waiting on the gate sees it. A variant the gate
does not catch is listed as such and makes the exit status 1.

With ``--impl vllm_ascend`` (run by ``tox -e vllm_ascend``'s env python, tox on the PATH) it runs
``tox -e vllm_ascend -- -x`` once per broken vllm-ascend (``tests/impls/vllm_ascend/broken_gate.py``),
as a pull request carrying that regression waits for it: from the tox call, the checkout's install
and every session the env runs before the failing one included; with ``--impl vllm_ascend_mrv2``,
per broken MRV2 speculator (``tests/impls/vllm_ascend_mrv2/broken_gate.py``, the variants of the
generation installed), which the env's one session sees beside the V1 proposer's tests.
``--direct`` runs the adapter's gate alone with pytest instead (no tox, no install).
"""

from __future__ import annotations

import argparse
import configparser
import inspect
import os
import re
import shlex
import statistics
import subprocess
import sys
import time

from rich.console import Console
from rich.table import Table

from mtp.ops import CoreOps
from mtp.pcp_proposer import PcpProposer
from mtp.proposer import MtpProposer
from tests.meta import broken_ops, broken_paths, broken_pcp, broken_proposers
from tests.meta.broken_gate import tp_variants, variants_of

GATE = ["--device", "sim", "-p", "no:cacheprovider", "-n", "auto", "--dist", "loadgroup", "tests/properties"]


def variants() -> dict[str, tuple[list[str], dict[str, str]]]:
    """name -> (extra pytest args, extra environment) that plug the variant in."""
    out = {}
    proposers = {**variants_of(broken_proposers, MtpProposer), **variants_of(broken_paths, MtpProposer)}
    for name in [*variants_of(broken_ops, CoreOps), *proposers]:
        out[name] = (["--impl", f"broken:{name}"], {})
    for name in variants_of(broken_pcp, PcpProposer):
        out[f"pcp:{name}"] = ([], {"MTP_BROKEN_PCP": name})
    for name in tp_variants():
        out[f"tp:{name}"] = ([], {"MTP_BROKEN_TP": name})
    return out


def adapter_gate(impl: str) -> list[str]:
    """The gate an adapter env runs (``--impl impl``): tox.ini's ``[adapter]`` pytest options and gate
    paths (its differential suite left out)."""
    tox = configparser.ConfigParser(interpolation=None)
    tox.read("tox.ini")
    options = shlex.split(tox["adapter"]["pytest"])[3:]  # after "python -m pytest"
    return [*options, "--impl", impl, *tox["adapter"]["gate"].split()]


ENV_OF = {"vllm_mrv2": "vllm", "vllm_ascend_mrv2": "vllm_ascend"}  # an implementation -> the tox env running it


def ascend_variants(impl: str = "vllm_ascend", direct: bool = False) -> dict[str, tuple[list[str], dict[str, str]]]:
    """Each broken vllm-ascend (``impl``: its V1 proposer, or its MRV2 speculator) with the break plugged
    in (the variants that apply to the generation installed): the env's tox run, or with ``direct``
    the whole gate under ``--impl impl``."""
    import importlib

    broken_gate = importlib.import_module(f"tests.impls.{impl}.broken_gate")
    names = broken_gate.variants() if hasattr(broken_gate, "variants") else list(broken_gate.VARIANTS)
    args = ["-p", f"tests.impls.{impl}.broken_gate", *(adapter_gate(impl) if direct else [])]
    return {name: (args, {broken_gate.ENV: name}) for name in names}


def time_to_failure(
    args: list[str], env: dict[str, str], extra: list[str], gate=GATE, tox_env: str | None = None
) -> tuple[float, bool, str]:
    """(seconds, caught, the first failing test) of one ``-x`` run of the gate (through ``tox_env``'s
    tox run where given). A failure raised in the variant's own code is no catch (``raised_in_a_break``)."""
    # -rf last: the last -r wins, and the failures' summary lines are what names the first one.
    if tox_env:
        cmd = ["tox", "-e", tox_env, "--", "-x", *args, *extra, "-rf"]
    else:
        cmd = [sys.executable, "-m", "pytest", "-p", "tests.meta.broken_gate", "-x", "-q", *gate, *args, *extra, "-rf"]
    start = time.perf_counter()
    # As tox runs the gate: bytecode cached (tox does not pass PYTHONDONTWRITEBYTECODE on; without the
    # cache every worker compiles vLLM's modules again, ~12 s of its start-up).
    base = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    run = subprocess.run(cmd, env={**base, "CI": "1", **env}, capture_output=True, text=True)
    seconds = time.perf_counter() - start
    failed = [line.split(" ", 2)[1] for line in run.stdout.splitlines() if line.startswith("FAILED ")]
    if not failed:
        return seconds, False, f"exit {run.returncode}"
    in_the_break = raised_in_a_break(run.stdout, failed[0])
    if in_the_break:
        return seconds, False, f"{failed[0]}: raised in the break itself ({in_the_break})"
    return seconds, True, failed[0]


# Where the variants' own code lives: a failure raised there is the break crashing, not the gate catching it.
BREAK_CODE = re.compile(r"(^|/)tests/(impls/\w+/\w*breaks|meta/broken_\w+)\.py$")
_RAISED_AT = re.compile(r"^(\S+\.py):\d+: \w+")  # the last line of a long traceback: where it was raised


def raised_in_a_break(output: str, test: str) -> str | None:
    """Where ``test``'s failure in a pytest run's ``output`` (long tracebacks) was raised, if that is the
    variants' own code (``BREAK_CODE``); None if the gate failed it elsewhere, or the output does not say."""
    name = test.rsplit("::", 1)[-1]
    lines = output.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith("_") and f" {name} " in line), None)
    if start is None:
        return None
    end = next((i for i in range(start + 1, len(lines)) if lines[i].startswith(("____", "===="))), len(lines))
    raised = [m[1] for m in map(_RAISED_AT.match, lines[start + 1 : end]) if m]
    return raised[-1] if raised and BREAK_CODE.search(raised[-1]) else None


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    extra = argv[argv.index("--") + 1 :] if "--" in argv else []
    parser = argparse.ArgumentParser(description=inspect.getdoc(sys.modules[__name__]).splitlines()[0])
    parser.add_argument("--only", nargs="*", help="variant names (default: all)")
    parser.add_argument(
        "--impl", choices=["vllm_ascend", "vllm_ascend_mrv2"], help="broken vllm-ascends instead of the core's variants"
    )
    parser.add_argument("--direct", action="store_true", help="with --impl: pytest on the gate alone, not tox")
    opts = parser.parse_args(argv[: argv.index("--")] if "--" in argv else argv)
    every, gate = (ascend_variants(opts.impl, opts.direct), []) if opts.impl else (variants(), GATE)
    tox_env = ENV_OF.get(opts.impl, opts.impl) if opts.impl and not opts.direct else None
    chosen = {n: v for n, v in every.items() if not opts.only or n in opts.only}
    console = Console(width=None if sys.stdout.isatty() else 160)  # a log keeps whole test names
    table = Table("variant", "seconds", "first failing test")
    times, missed = [], []
    for i, (name, (args, env)) in enumerate(chosen.items(), start=1):
        console.log(f"[{i}/{len(chosen)}] {name}")
        seconds, caught, first = time_to_failure(args, env, extra, gate, tox_env)
        if caught:
            times.append(seconds)
        else:
            missed.append(name)
        table.add_row(name, f"{seconds:.0f}" if caught else "[red]not caught[/]", first)
    console.print(table)
    if times:
        console.print(f"median {statistics.median(times):.0f} s, worst {max(times):.0f} s over {len(times)} variants")
    if missed:
        console.print(f"[red]not caught: {', '.join(missed)}[/]")
    return 1 if missed else 0


if __name__ == "__main__":
    sys.exit(main())
