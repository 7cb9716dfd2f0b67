"""N worker processes, one per rank of a group, started once and fed cases.

Each worker joins a real ``torch.distributed`` group (gloo on the simulator,
HCCL or NCCL on an accelerator) and hands every case it is sent to a serve
function (``"module:function"``, called as ``serve(case, rank, size, device)``),
which says what a rank of that kind of group does: ``sim.ranks.pcp`` serves
scenarios with a ``PcpProposer``. The pool never lets a test session hang: a rank that raises, exits or stops
answering ends the case with ``RankFailure`` naming the rank, inside a bounded
time, and the pool restarts itself for the next case. Ranks that issued
different numbers of collectives are reported as such.
"""

from __future__ import annotations

import os
import pickle
import queue
import shutil
import tempfile
import time
from dataclasses import dataclass, field

import torch.multiprocessing as mp


class RankFailure(RuntimeError):
    """A rank raised, exited or hung; the message names it."""


class RankError(Exception):
    """Raised by a serve function: the rank failed. kind: "crash" (the rank's own error), "collective" (lost its peers), "mismatch"."""

    def __init__(self, message: str, collectives: int, kind: str):
        super().__init__(message)
        self.collectives, self.kind = collectives, kind


class CollectiveMismatch(RankFailure):
    """Ranks issued different numbers of collectives (on hardware: a hang)."""


@dataclass
class RankResult:
    rank: int
    drafts: list = field(default_factory=list)
    traces: list = field(default_factory=list)  # per iteration: list of StepRecord
    collectives: int = 0


# What a simulator rank needs, imported once by the fork server instead of once per rank.
_PRELOAD = [
    "torch.distributed",
    "torch._dynamo",  # first imported by the first graph capture: ~2 s of CPU in every rank otherwise
    "devices.sim",
    "devices.collectives",
    "sim.ranks.pcp",
    "mtp.pcp_tp",
    "mtp.shared_expert_dp",
]


def rank_context(device_name: str, preload: tuple[str, ...] = ()):
    """How rank processes start: forked from a server that has imported torch and the core, and
    ``preload`` (on the simulator, ~5 s less CPU per rank than a fresh interpreter; the server is
    this process's first pool's), or spawned afresh on an accelerator, whose runtime must start in each rank."""
    if device_name != "sim":
        return mp.get_context("spawn")
    ctx = mp.get_context("forkserver")
    ctx.set_forkserver_preload([*_PRELOAD, *preload])
    return ctx


def _worker(
    rank: int,
    size: int,
    init_method: str,
    tasks,
    results,
    device_name: str,
    serve: str,
    collective_timeout_s: float,
    temp_dir: str,
):
    os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")
    tempfile.tempdir = temp_dir  # the pool's: removed when it closes, a rank killed mid-case included
    from devices import load_device
    from devices.collectives import init_group
    from devices.plugins import import_object

    if device_name != "sim":  # one accelerator per rank
        import torch

        getattr(torch, device_name).set_device(rank)
    elif size > len(cpus := sorted(os.sched_getaffinity(0))):
        # More ranks than cores: one core per rank, round robin, so that a gloo collective waits less
        # for its peers to be scheduled (2 cores, 4 ranks: 2.0 ms per all-gather pinned, 3.7 ms not).
        # With a core each, pinning only keeps gloo's own thread off another core (0.3 ms -> 0.9 ms).
        os.sched_setaffinity(0, {cpus[rank % len(cpus)]})
    device = load_device(device_name)
    init_group(device_name, rank, size, init_method, collective_timeout_s)
    serve_case = import_object(serve)
    while True:
        case = tasks.get()
        if case is None:
            return
        try:
            # Plain pickle: results hold hundreds of tiny tensors, and the queue's own pickler would
            # move each through shared memory and a file descriptor (most of a case's time).
            results.put(("ok", rank, pickle.dumps(serve_case(case, rank, size, device))))
        except RankError as exc:  # report, then keep serving
            results.put(("error", rank, (str(exc), exc.collectives, exc.kind)))


class RankPool:
    """``size`` rank processes on ``device_name``, each serving cases with ``serve``; ``run`` one case at a time."""

    def __init__(
        self,
        size: int,
        serve: str,
        device_name: str = "sim",
        case_timeout_s: float = 120.0,
        collective_timeout_s: float = 10.0,
    ):
        if size < 1:
            raise ValueError(f"size={size!r}: a group has at least one rank")
        self.size, self.serve, self.device_name = size, serve, device_name
        self.case_timeout_s, self.collective_timeout_s = case_timeout_s, collective_timeout_s
        self.procs: list = []
        self.temp_dir: str | None = None  # the ranks' temp dir (their tempfile.tempdir), removed at close
        self.preload: tuple[str, ...] = ()  # modules the fork server imports besides the core's

    def start(self) -> None:
        ctx = rank_context(self.device_name, self.preload)
        self.temp_dir = tempfile.mkdtemp(prefix="mtp_ranks_")
        # a file in the ranks' own directory, not a TCP port picked ahead: a port free when picked may be
        # taken (another pool's connections use ephemeral ports) before rank 0 listens on it
        init = f"file://{self.temp_dir}/rendezvous"
        self.tasks = [ctx.Queue() for _ in range(self.size)]
        self.results = ctx.Queue()
        self.procs = [
            ctx.Process(
                target=_worker,
                args=(
                    r,
                    self.size,
                    init,
                    self.tasks[r],
                    self.results,
                    self.device_name,
                    self.serve,
                    self.collective_timeout_s,
                    self.temp_dir,
                ),
                daemon=True,
            )
            for r in range(self.size)
        ]
        for p in self.procs:
            p.start()

    def close(self) -> None:
        """Stop the ranks: each told to end (so it exits as a process does, its temporary files removed),
        any still running a moment later killed (a rank that hung or a case left unfinished)."""
        started = [p for p in self.procs if p.pid is not None]  # a start that failed leaves some unstarted
        for q, p in zip(getattr(self, "tasks", []), self.procs):
            if p in started and p.is_alive():
                q.put(None)
        deadline = time.monotonic() + 2.0
        for p in started:
            p.join(timeout=max(0.0, deadline - time.monotonic()))
            if p.is_alive():
                p.kill()
                p.join(timeout=5)
        self.procs = []
        if self.temp_dir:
            shutil.rmtree(self.temp_dir, ignore_errors=True)
            self.temp_dir = None

    def run(self, case) -> list[RankResult]:
        """Every rank's result for ``case``; ``RankFailure`` if any rank fails."""
        self.submit(case)
        return self.collect()

    def submit(self, case) -> None:
        """Hand ``case`` to every rank; ``collect`` its results (or ``close`` the pool) before the next."""
        if not self.procs or not all(p.is_alive() for p in self.procs):
            self.close()
            self.start()
        for q in self.tasks:
            q.put(case)

    def collect(self) -> list[RankResult]:
        """Every rank's result for the case submitted last; ``RankFailure`` if any rank fails."""
        try:
            return self._collect()
        except RankFailure:
            self.close()  # a failed case leaves the group unusable: restart next time
            raise

    def _collect(self) -> list[RankResult]:
        deadline = time.monotonic() + self.case_timeout_s
        done: dict[int, RankResult] = {}
        errors: dict[int, tuple[str, int, str]] = {}  # (message, collectives, kind), in arrival order
        while len(done) + len(errors) < self.size:
            try:
                status, rank, payload = self.results.get(timeout=0.2)
            except queue.Empty:
                self._check_alive(done, errors)
                if time.monotonic() > deadline:
                    waiting = sorted(set(range(self.size)) - set(done) - set(errors))
                    seen = "; ".join(f"rank {r}: {e[0].splitlines()[0]}" for r, e in errors.items())
                    raise RankFailure(
                        f"rank {waiting[0]} did not answer within the time limit (hung?)"
                        + (f"; meanwhile {seen}" if seen else "")
                    ) from None
                continue
            if status == "ok":
                done[rank] = pickle.loads(payload)
                continue
            if payload[2] == "crash":  # the rank's own error: the others can only wait for it
                raise RankFailure(f"rank {rank} failed: {payload[0]}")
            errors[rank] = payload
            # Lost its peers: a peer that has not answered by now is stuck or hung.
            deadline = min(deadline, time.monotonic() + 3.0)
        mismatched = [r for r, e in errors.items() if e[2] == "mismatch"]
        if mismatched:
            raise CollectiveMismatch(errors[mismatched[0]][0].splitlines()[0])
        counts = {r: res.collectives for r, res in done.items()} | {r: e[1] for r, e in errors.items()}
        if len(set(counts.values())) > 1:
            raise CollectiveMismatch(f"ranks issued different numbers of collectives: {dict(sorted(counts.items()))}")
        if errors:
            first = next(iter(errors))
            raise RankFailure(f"rank {first} failed: {errors[first][0]}")
        return [done[r] for r in range(self.size)]

    def _check_alive(self, done, errors) -> None:
        for r, p in enumerate(self.procs):
            if p.exitcode is not None and r not in done and r not in errors:
                raise RankFailure(f"rank {r} exited with code {p.exitcode} during the case")
