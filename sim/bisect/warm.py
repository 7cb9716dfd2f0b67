"""A warm interpreter of an env: the harness, torch and transformers imported once, a fork per command.

A step of ``python -m sim bisect`` runs the gate in a fresh interpreter of the step's env, and most of
a replay's time there is imports (about 16 s of a 20 s replay, on 2 cores). The imports that do not
depend on the commit under test are made once, by a server process of that env (``WarmInterpreter``);
each command then runs in a child forked from it, as ``python -m MODULE ARGS`` would, its output to a
file. Nothing of vLLM or vllm-ascend is imported before the fork: the commit's own code (and vLLM's
platform, which loads vllm-ascend's plugin) is imported by each child, so every step still tests the
commit checked out when it runs (checked: the server refuses to serve with either imported).

The server is ``serve(MODULES)`` (the modules to preload) in the env's interpreter: one JSON request per
line on stdin (``module``, ``argv``, ``log``), one ``{"rc": N}`` per line on stdout when the child ends.
"""

from __future__ import annotations

import atexit
import importlib
import json
import os
import runpy
import subprocess
import sys
import traceback
from pathlib import Path

# What every step imports whatever the commit: the harness's CLI and serving loop (torch with them),
# torch's compiler stack (vLLM's import pulls it in) and transformers.
PRELOAD = ("sim.cli", "sim.serving.run", "torch._dynamo", "torch._inductor.lowering", "transformers")
NOT_BEFORE_THE_FORK = ("vllm", "vllm_ascend")
SERVER = "import sys; from sim.bisect.warm import serve; serve(sys.argv[1:])"


class WarmInterpreter:
    """A ``serve`` process of the interpreter ``python``, started on first use."""

    def __init__(self, python: Path, env: dict, cwd: Path, preload: tuple[str, ...] = PRELOAD):
        self.python, self.env, self.cwd, self.preload = python, env, cwd, preload
        self.proc: subprocess.Popen | None = None

    def run(self, module: str, argv: list[str], log: Path) -> int:
        """``python -m module *argv`` in a child of the server, stdout and stderr to ``log``; its exit status."""
        if self.proc is None or self.proc.poll() is not None:
            self.proc = subprocess.Popen(
                [str(self.python), "-c", SERVER, *self.preload],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                cwd=self.cwd,
                env=self.env,
                text=True,
            )
        self.proc.stdin.write(json.dumps({"module": module, "argv": argv, "log": str(log)}) + "\n")
        self.proc.stdin.flush()
        reply = self.proc.stdout.readline()
        if not reply:  # the server itself failed (its preload): say so as a command would
            log.write_text(f"the warm interpreter {self.python} exited with {self.proc.wait()}\n")
            return 2
        return json.loads(reply)["rc"]

    def close(self) -> None:
        if self.proc is not None:
            self.proc.stdin.close()
            self.proc.wait()
            self.proc = None


def _child(request: dict) -> int:
    """Run the request's module as ``__main__`` with its output to its log; the exit status it asks for."""
    fd = os.open(request["log"], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
    os.dup2(fd, 1)
    os.dup2(fd, 2)
    os.close(fd)
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)  # the server's requests are not the child's to read
    os.close(null)
    sys.argv = [request["module"], *request["argv"]]
    try:
        runpy.run_module(request["module"], run_name="__main__", alter_sys=True)
        return 0
    except SystemExit as exc:
        if exc.code is None or isinstance(exc.code, int):
            return exc.code or 0
        print(exc.code, file=sys.stderr)
        return 1
    except BaseException:  # as the interpreter reports an uncaught exception
        traceback.print_exc()
        return 1
    finally:
        sys.stdout.flush()
        sys.stderr.flush()


def serve(preload: list[str]) -> None:
    for name in preload:
        importlib.import_module(name)
    early = sorted(m for m in sys.modules if m.split(".")[0] in NOT_BEFORE_THE_FORK)
    if early:
        sys.exit(f"sim.bisect.warm: {early[0]} was imported before the fork; each step must import it itself")
    out = sys.stdout
    for line in sys.stdin:
        pid = os.fork()
        if pid == 0:  # never returns to this loop, whatever the command does
            code = 1
            try:
                code = _child(json.loads(line))
            finally:
                atexit._run_exitfuncs()  # as an interpreter's exit would: temporary folders removed
                os._exit(code)
        _, status = os.waitpid(pid, 0)
        out.write(json.dumps({"rc": os.waitstatus_to_exitcode(status)}) + "\n")
        out.flush()
