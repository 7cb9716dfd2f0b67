"""``NPUModelRunner``'s methods, compiled from vllm-ascend's own source.

``vllm_ascend.worker.model_runner_v1`` does not import in the CPU environment (it imports
``attention.sfa_v1``, which imports ``scipy``, outside the pinned closure), but the adapter calls
runner methods: ``propose_draft_token_ids`` (the runner's hand-off to its drafter, with the
methods it calls on the runner) and, in full-graph mode, ``_pad_query_start_loc_for_fia``.
``runner_method`` takes a method's definition from the installed source file (``ast``) and
compiles it with the module-level names it reads, each imported from where the runner's module
imports it, so what runs is vllm-ascend's code of the version under test, not a copy. A name
whose import fails here is left unbound: the method fails with a ``NameError`` naming it only if
it reaches that name (the branches of other drafters). ``RunnerMethod`` puts one on a runner
view's class, compiled once and looked up on each access (so a test can replace it);
``edited_runner_method`` compiles one with a textual edit of its source, as a pull request changing
the runner would. A ``super()`` in a method is the runner's base class's (vLLM's ``GPUModelRunner``),
bound to the view. ``module_function`` compiles one of the module's own functions (``checkout_function``
one of another file's); ``init_value`` compiles what the runner's constructor (or a method it calls) assigns
to one of its attributes, as a function of the view (its own input batch, its samplers);
``named_tuple_fields`` reads a ``NamedTuple`` of the runner's module (``ExecuteModelState``).
"""

from __future__ import annotations
import __future__

import ast
import builtins
import copy
import functools
import importlib.util
import textwrap
import types
from pathlib import Path

from sim.impls.kit.ascend.importing import import_ascend

RUNNER = "vllm_ascend/worker/model_runner_v1.py"


def _source(relative: str = RUNNER) -> Path:
    """A file of the installed vllm-ascend (its runner's module by default)."""
    spec = importlib.util.find_spec("vllm_ascend")
    return Path(next(iter(spec.submodule_search_locations))).parent / relative


@functools.cache
def _tree() -> ast.Module:
    return ast.parse(_source().read_text())


def _runner_class() -> ast.ClassDef:
    return next(n for n in _tree().body if isinstance(n, ast.ClassDef) and n.name == "NPUModelRunner")


@functools.cache
def base_class():
    """``NPUModelRunner``'s base class, as its module imports it (vLLM's ``GPUModelRunner``)."""
    (base,) = _runner_class().bases
    module, attr = _imported_names()[base.id]
    return getattr(import_ascend(module), attr)


@functools.cache
def _imported_names() -> dict[str, tuple[str, str | None]]:
    """Each name the runner's module binds by an absolute import: (module, attribute or None)."""
    names: dict[str, tuple[str, str | None]] = {}
    for node in ast.walk(_tree()):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                names.setdefault(alias.asname or alias.name, (node.module, alias.name))
        elif isinstance(node, ast.Import):
            for alias in node.names:
                bound = alias.asname or alias.name.split(".")[0]
                names.setdefault(bound, (alias.name if alias.asname else bound, None))
    return names


def _module_function(name: str) -> ast.FunctionDef | None:
    """The runner module's own top-level function ``name`` (e.g. ``_post_process_cudagraph_mode``)."""
    return next((n for n in _tree().body if isinstance(n, ast.FunctionDef) and n.name == name), None)


def _globals_of(func: ast.FunctionDef) -> dict:
    """The module-level names ``func`` reads, imported as the runner's module imports them, or, for the
    module's own top-level functions, compiled from its source as the methods are."""
    imported = _imported_names()
    loaded = {n.id for n in ast.walk(func) if isinstance(n, ast.Name) and isinstance(n.ctx, ast.Load)}
    names = {}
    for name in sorted(loaded - set(dir(builtins))):
        if name not in imported:
            if (own := _module_function(name)) is not None and own is not func:
                names[name] = _compiled(own)
            continue
        module, attr = imported[name]
        try:
            value = import_ascend(module)
            names[name] = getattr(value, attr) if attr else value
        except (ImportError, AttributeError):
            continue  # unreachable here (another drafter's branch): a NameError if ever reached
    return names


@functools.cache
def defines(name: str) -> bool:
    """Whether ``NPUModelRunner`` itself defines ``name`` (a method or property; not an inherited one)."""
    return any(isinstance(n, ast.FunctionDef) and n.name == name for n in _runner_class().body)


@functools.cache
def runner_method(name: str):
    """``NPUModelRunner.<name>`` as a plain function (bind it with ``__get__``; a property's getter for
    a property). Annotations are not evaluated (as under ``from __future__ import annotations``)."""
    return _compiled(_method(name))


@functools.cache
def method_source(name: str) -> str:
    """``NPUModelRunner.<name>``'s source, as the checkout has it."""
    return ast.get_source_segment(_source().read_text(), _method(name))


def edited_runner_method(name: str, *edits: tuple[str, str]):
    """``runner_method(name)`` compiled from its source with each ``(old, new)`` edit applied (the text
    as the file has it, indented; each found exactly once): a change of the runner's code, as a pull
    request would make it."""
    node = _method(name)
    source = " " * node.col_offset + ast.get_source_segment(_source().read_text(), node)
    for old, new in edits:
        if source.count(old) != 1:
            raise ValueError(f"NPUModelRunner.{name}: {old!r} found {source.count(old)} times in its source, not once")
        source = source.replace(old, new)
    return _compiled(ast.parse(textwrap.dedent(source)).body[0])


def checkout_function(relative: str, name: str, **names):
    """The top-level function ``name`` of another file of the checkout (``relative`` to its package's
    parent), compiled from its source with ``names`` as its globals, or None where the file or the
    function is absent (another generation's)."""
    path = _source(relative)
    if not path.exists():
        return None
    found = [n for n in ast.parse(path.read_text()).body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not found:
        return None
    exec(compile(ast.Module(body=found, type_ignores=[]), str(path), "exec"), names)  # noqa: S102 - vllm-ascend's own code
    return names[name]


def run_checkout_module(relative: str) -> bool:
    """Runs another file of the checkout (``relative`` to its package's parent) as a module of its own, not
    through its package's ``__init__``; False where the file is absent (another generation's)."""
    path = _source(relative)
    if not path.exists():
        return False
    exec(compile(path.read_text(), str(path), "exec"), {"__name__": relative[:-3].replace("/", ".")})  # noqa: S102 - vllm-ascend's own code
    return True


def module_function(name: str, **names):
    """The runner module's own top-level function ``name``, compiled from its source, undecorated, with
    ``names`` in place of the module-level names it reads."""
    found = _module_function(name)
    if found is None:
        raise LookupError(f"{name}: not a function of {_source()}")
    return _compiled(found, names)


@functools.cache
def named_tuple_fields(name: str) -> tuple[str, ...]:
    """The fields, in order, of the runner module's own class ``name`` (a ``NamedTuple``)."""
    found = [n for n in _tree().body if isinstance(n, ast.ClassDef) and n.name == name]
    if not found:
        raise LookupError(f"{name}: not a class of {_source()}")
    return tuple(n.target.id for n in found[0].body if isinstance(n, ast.AnnAssign))


def init_value(attr: str, within: str = "__init__", **names):
    """What ``NPUModelRunner.<within>`` (its constructor, or a method it calls) assigns to ``self.<attr>``
    (its first such assignment), as a function of the runner: ``init_value("input_batch")(runner)``
    builds the runner's own input batch from the attributes that expression reads; ``names``: the
    locals of ``within`` it reads (the constructor's ``vllm_config``)."""
    found = _init_expression(attr, within)
    return types.FunctionType(found.__code__, found.__globals__ | names, found.__name__) if names else found


@functools.cache
def _init_expression(attr: str, within: str):
    """``init_value``'s function, compiled once (the locals it is given are its globals at each call)."""
    for node in ast.walk(_method(within)):
        if isinstance(node, (ast.Assign, ast.AnnAssign)) and node.value is not None:
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(_is_self_attr(t, attr) for t in targets):
                func = ast.parse(f"def init_{attr}(self):\n    return None").body[0]
                func.body[0].value = node.value
                return _compiled(func)
    raise LookupError(f"NPUModelRunner.{within}: assigns no self.{attr} in {_source()}")


def _is_self_attr(node: ast.AST, attr: str) -> bool:
    return isinstance(node, ast.Attribute) and node.attr == attr and getattr(node.value, "id", None) == "self"


def _method(name: str) -> ast.FunctionDef:
    found = [n for n in _runner_class().body if isinstance(n, ast.FunctionDef) and n.name == name]
    if not found:
        raise LookupError(f"NPUModelRunner.{name}: not in {_source()}")
    return found[0]


class _Super:
    """``super()`` in a method of ``NPUModelRunner`` compiled here (no class around it): its base class's
    attributes (vLLM's ``GPUModelRunner``), bound to the runner view the method runs on."""

    def __init__(self, obj):
        self.obj = obj

    def __getattr__(self, name):
        found = getattr(base_class(), name)
        return found.__get__(self.obj) if hasattr(found, "__get__") else found


class _NoArgSuper(ast.NodeTransformer):
    """``super()`` as ``_Super(<the method's first argument>)``."""

    def __init__(self, first: str):
        self.first = first

    def visit_Call(self, node):
        self.generic_visit(node)
        if isinstance(node.func, ast.Name) and node.func.id == "super" and not node.args and not node.keywords:
            return ast.Call(ast.Name("_Super", ast.Load()), [ast.Name(self.first, ast.Load())], [])
        return node


def _compiled(func: ast.FunctionDef, overrides: dict | None = None):
    """``func``'s definition compiled with the module-level names it reads, undecorated (a ``super()`` in it
    is the runner's base class's, ``_Super``)."""
    func = copy.deepcopy(ast.FunctionDef(**{**{f: getattr(func, f) for f in func._fields}, "decorator_list": []}))
    if func.args.args:
        func = _NoArgSuper(func.args.args[0].arg).visit(func)
    module = ast.fix_missing_locations(ast.Module(body=[func], type_ignores=[]))
    names = _globals_of(func) | {"_Super": _Super} | (overrides or {})
    flags = __future__.annotations.compiler_flag
    exec(compile(module, str(_source()), "exec", flags=flags), names)  # noqa: S102 - vllm-ascend's own code
    return names[func.name]


class RunnerMethod:
    """A runner view's ``NPUModelRunner.<name>``, from source; ``prop=True``: as the property it is. One the
    runner inherits (v0.18.0's ``_copy_valid_sampled_token_count``) is its base class's, vLLM's own."""

    def __init__(self, name: str, prop: bool = False):
        self.name, self.prop = name, prop

    def __set_name__(self, owner, attr):
        self.attr = attr

    def __get__(self, obj, owner=None):
        if defines(self.name):
            func = runner_method(self.name)
        elif (func := getattr(base_class(), self.name, None)) is None:  # another generation's: absent, as there
            raise AttributeError(f"NPUModelRunner.{self.name}: not in {_source()} nor its base class")
        elif self.prop:
            func = func.fget
        if obj is None:
            return func
        return func(obj) if self.prop else func.__get__(obj, owner)
