"""The shape every adapter's divergences module shares: its gate skips, built one way.

An adapter's ``divergences`` module holds ``DIVERGENCES`` (``sim.impls.divergence.table``),
``RULES`` (``rules_of`` them) and ``GATE_SKIPS``: the gate's properties it cannot run, by test
function or parametrization name. Two skips recur: the graph-mode tests (the adapters drive
their proposers eagerly only; vllm-ascend's, which runs its full graphs on the simulator, names its
own per parametrization) and, for a proposer whose host copies are torch CPU tensors, the
no-host-sync property on the CPU simulator (where host copies cannot be told from device reads).
"""

from __future__ import annotations

from sim.impls import Skip

HOST_SYNC = "test_padded_path_makes_no_host_sync"
GRAPHS = "test_graph_modes_match_reference"
TYPICAL_GRAPHS = "test_a_typical_serving_run_in_graph_mode_matches_reference"  # the fixed run of each graph mode
DUMMY_RUN_GRAPHS = "test_dummy_run_in_graph_mode_computes_logits_like_a_real_call"
GRAPH_TESTS = (GRAPHS, TYPICAL_GRAPHS, DUMMY_RUN_GRAPHS)  # the gate's tests that run the proposer in a graph mode
COUNTED_AS_SYNCS = "on a CPU device the simulator counts them as syncs"


def host_copies(who: str, reads: str, why: str = COUNTED_AS_SYNCS) -> Skip:
    """The no-host-sync skip, on the simulator only: ``who`` keeps its host copies (``reads``) as CPU tensors."""
    return Skip(
        f"{who} keeps its host copies as torch CPU tensors ({reads}); {why}",
        devices=("sim",),  # on an accelerator the host copies are host memory the watcher tells apart
    )


def gate_skips(eager_only: str, host_sync: Skip | None = None, more: dict[str, Skip] | None = None) -> dict[str, Skip]:
    """``GATE_SKIPS``: ``more`` (test or parametrization name -> ``Skip``), the host-sync skip if given,
    and the graph-mode skips (``GRAPH_TESTS``) on every device with the reason ``eager_only``."""
    skips = dict(more or {})
    if host_sync is not None:
        skips[HOST_SYNC] = host_sync
    skips.update(dict.fromkeys(GRAPH_TESTS, Skip(eager_only)))
    return skips
