"""The command line of ``python -m sim``: its subcommands, their options and what each takes.

Each subcommand's code is in ``sim.cli`` (``cmd_*``), and in ``sim.bisect`` and ``sim.explain`` for the
two that bring their own options; a bad value is argparse's one line and exit status 2.
"""

from __future__ import annotations

import argparse
from dataclasses import fields

from sim.serving.scenario import ACCEPT_POLICIES, DRAFT_ATTNS, GRAPH_MODES, METHODS, SCHEDULERS, Scenario

DEFAULTS = {f.name: f.default for f in fields(Scenario)}


class _Parser(argparse.ArgumentParser):
    def error(self, message: str):
        """argparse's status (2), in one line (no usage block: ``--help`` has it)."""
        self.exit(2, f"{self.prog}: error: {message}\n")


def _positive(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} is not a positive integer")
    return value


def _seeds(text: str) -> list[int]:
    """``7``, ``0..99`` (inclusive) or ``1,5,9``."""
    try:
        if ".." in text:
            lo, hi = (int(x) for x in text.split(".."))
            seeds = list(range(lo, hi + 1))
        else:
            seeds = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected N, A..B or A,B,C") from None
    if not seeds or min(seeds) < 0:
        raise argparse.ArgumentTypeError(f"{text!r}: expected at least one seed, none negative")
    return seeds


def build_parser(description: str) -> argparse.ArgumentParser:
    """``python -m sim``'s parser; ``description`` heads its ``--help``."""
    parser = _Parser(
        prog="python -m sim", description=description, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    sub = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)
    fmt = argparse.ArgumentDefaultsHelpFormatter

    run = sub.add_parser(
        "run", help="serve a mixed workload, compare every call with the reference", formatter_class=fmt
    )
    run.add_argument("--requests", type=_positive, default=24, help="requests in the workload")
    seeds = run.add_mutually_exclusive_group()
    seeds.add_argument("--seed", type=int, default=0, help="workload, model and acceptance seed")
    seeds.add_argument("--seeds", type=_seeds, metavar="A..B", help="a sweep: one run per seed (A..B, A,B,C or N)")
    run.add_argument("--k", type=_positive, default=DEFAULTS["num_spec_tokens"], help="drafts per request (K)")
    run.add_argument("--block-size", type=_positive, default=DEFAULTS["block_size"], help="tokens per KV block")
    run.add_argument("--max-model-len", type=_positive, default=96, help="positions at or past it overflow")
    run.add_argument("--graph-mode", choices=GRAPH_MODES, default="eager", help="how the proposer runs its steps")
    run.add_argument("--unpadded", action="store_true", help="unpadded drafter batch (disable_padded_drafter_batch)")
    run.add_argument("--accept", choices=ACCEPT_POLICIES, default="random", help="how many drafts the target accepts")
    run.add_argument("--mrope", action="store_true", help="a multimodal model: image prompts, M-RoPE [3, T] positions")
    run.add_argument(
        "--method",
        choices=METHODS,
        default="mtp",
        help="draft method (eagle: EAGLE-1; eagle3 combines aux hidden states; draft_model: a draft LM, no hidden states)",
    )
    run.add_argument(
        "--attn",
        choices=DRAFT_ATTNS,
        default="gqa",
        help="the draft layer's attention (mla, sfa: its RoPE in the metadata)",
    )
    run.add_argument(
        "--decode-node",
        action="store_true",
        help="the decode node of a prefill/decode split: prompts' KV transferred, no drafts at first",
    )
    run.add_argument(
        "--scheduler",
        choices=SCHEDULERS,
        default="own",
        help="whose steps: the serving loop's own, or vLLM's Scheduler (an env with vLLM) with its blocks and"
        " preemption (its AsyncScheduler with --async-scheduling), or one of vllm-ascend's own (an env with it)",
    )
    run.add_argument(
        "--kv-blocks",
        type=int,
        default=0,
        help="with --scheduler vllm, the KV cache's blocks (0: enough for every request); fewer make vLLM preempt",
    )
    run.add_argument(
        "--prefix-caching",
        action="store_true",
        help="with --scheduler vllm, vLLM's prefix caching: a request past the blocks it finds cached reads their KV",
    )
    run.add_argument(
        "--shared-prefix",
        type=int,
        default=0,
        help="the first tokens every prompt shares (a prefix cache's hits; 0: none)",
    )
    run.add_argument(
        "--kernel-block-size",
        type=int,
        default=0,
        help="a hybrid target's layout (Qwen3.5's): each block split into kernel blocks of this many tokens, the"
        " runner's table of them handed on (--impl vllm_ascend; 0: none)",
    )
    run.add_argument(
        "--async-scheduling",
        action="store_true",
        help="the model runner's asynchronous scheduling (--impl vllm_ascend): what it hands the next step checked",
    )
    run.add_argument(
        "--runner-samples",
        action="store_true",
        help="the model runner samples (--impl vllm_ascend, vllm_ascend_mrv2): its sampler and bookkeeping feed the drafter",
    )
    run.add_argument(
        "--dp",
        type=_positive,
        metavar="N",
        help="on N data-parallel ranks (--impl vllm_ascend), each its own workload (seed + rank)",
    )
    run.add_argument(
        "--reduce-sample",
        action="store_true",
        help="with --tp and --impl vllm_ascend: vllm-ascend's enable_reduce_sample (each rank's slice reduced)",
    )
    run.add_argument("--no-check", action="store_true", help="skip the reference comparison")
    run.add_argument("--save", metavar="PATH", help="also write the scenario as JSON (a single seed)")
    run.add_argument("--json", metavar="PATH", help="write the report as JSON (for CI artifacts and `report`)")

    replay = sub.add_parser(
        "replay", help="rerun a scenario JSON file (as a failing test writes it)", formatter_class=fmt
    )
    replay.add_argument("case", help="the scenario file (or a DP case: its ranks' scenarios)")
    replay.add_argument("--ops", metavar="MODULE:CLASS", help="a CoreOps subclass to run instead of the core's")
    replay.add_argument("--proposer", metavar="MODULE:CLASS", help="with --pcp: a PcpProposer subclass to run")
    replay.add_argument("--json", metavar="PATH", help="write the report as JSON")

    for p in (run, replay):
        p.add_argument(
            "--pcp", type=_positive, metavar="P", help="run on P prefill-context-parallel ranks, compare with one"
        )
        p.add_argument(
            "--tp",
            type=_positive,
            metavar="T",
            help="run on T tensor-parallel ranks (a TP path below), compare with one; with --impl vllm_ascend,"
            " its drafter on T ranks, the lm head split over them, each rank against the reference",
        )
        p.add_argument(
            "--lmhead-tp",
            action="store_true",
            help="split the lm head's vocabulary over the --tp ranks (with --dp: vllm-ascend's, over the DP ranks)",
        )
        p.add_argument(
            "--shared-expert-dp", action="store_true", help="run the draft layer sequence parallel over the --tp ranks"
        )
        p.add_argument("--impl", default="core", help="implementation under test: core, vllm, or a registered adapter")
        p.add_argument(
            "--divergences",
            metavar="PATH",
            help="the implementation's own list of accepted divergence ids (one per line), as the gate's"
            " --divergences takes it; default: the harness's table",
        )
        p.add_argument("--device", default="sim", help="device: sim, cuda, npu, or an installed backend")

    report = sub.add_parser("report", help="draw a --json report as a picture", formatter_class=fmt)
    report.add_argument("runs", metavar="RUN.json", help="written by `run --json`")
    report.add_argument("--html", metavar="OUT", help="the page to write (default: RUN.json with .html)")

    sens = sub.add_parser(
        "sensitivity", help="how often one wrong input changes the tiny model's draft", formatter_class=fmt
    )
    sens.add_argument("--trials", type=_positive, default=500, help="random contexts per perturbation")

    from sim.bisect import add_parser as add_bisect
    from sim.explain import add_parser as add_explain

    explain, bis = add_explain(sub, fmt), add_bisect(sub, fmt)
    for p in (run, replay, report, sens, explain, bis):
        p.add_argument("--debug", action="store_true", help="show tracebacks")
    return parser
