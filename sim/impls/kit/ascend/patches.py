"""vllm-ascend's patches of vLLM as its packages deploy them: which ones a package imports in this
deployment, and one applied from its file alone.

vllm-ascend patches vLLM from two packages, each of whose ``__init__`` imports its patch modules, some
under tests of the deployment: ``patch/platform`` (the scheduler and KV cache manager: ``schedulers``)
and ``patch/worker`` (the model runner's pieces; on main the MRV2 graph manager and input batch, which
0.23.0 leaves dormant on vLLM 0.23.0). Importing a package runs all of its patches, NPU-only ones
included, so a patch is applied here from its file alone (``execute``), only where the package would
import it (``deployed``).
"""

from __future__ import annotations

import ast
import functools
import importlib.util
import sys
from pathlib import Path

PLATFORM, WORKER = "vllm_ascend/patch/platform", "vllm_ascend/patch/worker"  # the two patch packages


def file(package: str, name: str) -> Path:
    """The file of module ``name`` (dotted below ``package``: ``patch_v2.patch_input_batch``) of the patch
    ``package`` (``PLATFORM``, ``WORKER``) in the vllm-ascend installed; ``__init__``: the package's own."""
    from sim.impls.kit.ascend.importing import import_ascend

    return Path(import_ascend("vllm_ascend").__file__).parent.parent / package / f"{name.replace('.', '/')}.py"


def module(package: str, name: str) -> str:
    """The dotted name module ``name`` of the patch ``package`` is imported under."""
    return f"{package.replace('/', '.')}.{name}"


def execute(name: str, path: Path, replaced: dict | None = None, registered: bool = False):
    """The module at ``path`` executed under ``name``, with ``replaced`` (object -> attribute names) as
    they were before it ran: what it assigns there at import is undone. ``registered``: the module is
    ``sys.modules[name]``, what an import of that name then finds (its package is not imported)."""
    replaced = replaced or {}
    saved = {(owner, attr): owner.__dict__[attr] for owner, attrs in replaced.items() for attr in attrs}
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    if registered:
        sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    finally:
        for (owner, attr), value in saved.items():
            setattr(owner, attr, value)
    return module


def _imports_a_patch(node: ast.stmt) -> bool:
    modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
    return any(m.startswith("vllm_ascend.patch") for m in modules)


def _binds_only(node: ast.stmt) -> bool:
    """Whether a top-level ``if`` only binds names (a flag set by the deployment's versions): no call of its own."""
    body = [*node.body, *node.orelse]
    return all(isinstance(n, ast.Assign | ast.AnnAssign | ast.Pass) for n in body)


@functools.cache
def _package(init: Path) -> tuple[ast.Module, dict]:
    """A patch package's ``__init__`` at ``init``, parsed, and what its top-level lines bind but for its patches:
    its imports of other modules, its assignments, and the ``if``s that only assign (read once per process)."""
    tree = ast.parse(init.read_text())
    names: dict = {}
    for node in tree.body:
        binds = isinstance(node, ast.Import | ast.ImportFrom) and not _imports_a_patch(node)
        flag = isinstance(node, ast.If) and _binds_only(node)
        if binds or flag or isinstance(node, ast.Assign | ast.AnnAssign):
            exec(compile(ast.Module([node], []), str(init), "exec"), names)  # noqa: S102 - the package's own line
    return tree, names


def deployed(init: Path, module: str) -> bool:
    """Whether the package whose ``__init__`` is at ``init`` imports its patch ``module`` (its dotted name) in
    this deployment: at its top level, or under ``if`` tests that hold here, each test evaluated over what the
    package's own top-level lines bind (its imports of other modules, ``os``, ``envs``, ``vllm_version_is``,
    ``HAS_TRITON``, and its assignments) and only where one of its branches imports the patch."""
    tree, names = _package(init)

    def imports(node) -> bool:
        return isinstance(node, ast.Import) and module in [a.name for a in node.names]

    def mentions(body: list) -> bool:
        return any(imports(n) for node in body for n in ast.walk(node))

    def imported(body: list) -> bool:
        for node in body:
            if imports(node):
                return True
            if isinstance(node, ast.If) and (mentions(node.body) or mentions(node.orelse)):
                holds = eval(compile(ast.Expression(node.test), str(init), "eval"), names)  # noqa: S307 - as above
                if imported(node.body if holds else node.orelse):
                    return True
        return False

    return imported(tree.body)
