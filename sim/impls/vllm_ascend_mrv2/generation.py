"""What differs between the vllm-ascend generations whose MRV2 MTP speculator the adapter drives, found
by what their modules and classes hold, not by version.

- Where ``init_speculator`` lives: main, ``vllm_ascend.worker.v2.spec_decode`` (``method == "mtp"``:
  ``AscendMTPSpeculator(AscendAutoRegressiveSpeculator, MTPSpeculator)``); 0.23.0,
  ``vllm_ascend.worker.v2.spec_decode.eagle`` (``use_eagle()``, true for ``mtp`` in vLLM 0.23.0:
  ``AscendEagleSpeculator(EagleSpeculator)``, whose forward contract is a tuple, as vllm-ascend
  0.23.0's patched DeepSeek MTP layer returns).
- When the host lengths attention reads are written: 0.23.0 before each draft step's forward
  (``_ascend_prepare_decode_draft``) and again after it; main only after it (``_update_decode_attn_metadata``
  from ``_generate_draft``), so the forward reads what the builder took at build.
- The probabilistic rejection kernel's acceptance test: 0.23.0's and v0.26.0rc's take the uniform as 0
  (``accepts_without_a_uniform``); main's draws it since #13470. v0.26.0rc is main's speculator with that
  kernel: the generation ``0.26.0``.
- ``_multi_step_decode``: main's takes the batch's host upper bound of ``seq_lens`` (vLLM 0.27), 0.23.0's not.
- main picks its per-step metadata handling by ``attn_architecture`` (``set_attn`` derives it from the
  draft layer's backend class): the flat one (``GQA``) or MLA's (its decode part's lists). 0.23.0 has one
  handling, the flat one.

What differs at import (main's ``sfa_v1`` imports SciPy) is absorbed by ``importing``.
"""

from __future__ import annotations

import contextlib
import functools
import importlib.util
import inspect
import sys

from sim.impls.kit.ascend import importing as ascend_importing
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.signatures import takes
from sim.impls.vllm_ascend_mrv2 import importing

# main's names for the per-step metadata handling of each draft attention family (``attn_architecture``)
ARCHITECTURES = {"gqa": "GQA", "mla": "MLA", "sfa": "SFA"}
# vLLM's half of the speculator the adapter drives (its prefill and decode input kernels), vLLM 0.23 on
AR = "vllm.v1.worker.gpu.spec_decode.autoregressive.speculator"


def init_speculator():
    """This generation's ``init_speculator(vllm_config, device)``: main's package-level one, else 0.23.0's."""
    importing.prepare()
    package = import_ascend("vllm_ascend.worker.v2.spec_decode")
    if hasattr(package, "init_speculator"):
        return package.init_speculator
    return import_ascend("vllm_ascend.worker.v2.spec_decode.eagle").init_speculator


@functools.cache
def picks_handling_by_family() -> bool:
    """Whether the speculator picks its per-step metadata handling by the draft layer's backend (main's
    ``set_attn`` sets ``attn_architecture``); 0.23.0's has one handling, the flat one."""
    own = [k for k in speculator_class().__mro__ if k.__module__.startswith("vllm_ascend")]
    return any("attn_architecture" in inspect.getsource(k) for k in own)


def set_attn_architecture(spec, attn: str = "gqa") -> None:
    """What ``set_attn`` derives from the draft layer's backend of family ``attn`` on main (``attn_architecture``:
    the flat handling for GQA, ``MLA`` for MLA); 0.23.0 has one handling, the flat one."""
    if "attn_architecture" in vars(spec):
        spec.attn_architecture = ARCHITECTURES[attn]


def speculator_class() -> type:
    """The class this generation's ``init_speculator`` makes for ``mtp``, without making one: main's
    ``AscendMTPSpeculator`` where the ``mtp`` package exists, else ``AscendEagleSpeculator`` (0.23.0,
    and v0.24.0rc, whose package-level ``init_speculator`` sends ``mtp`` to eagle's)."""
    importing.prepare()
    package = "vllm_ascend.worker.v2.spec_decode"
    if importlib.util.find_spec(f"{package}.mtp") is not None:
        return import_ascend(f"{package}.mtp.speculator").AscendMTPSpeculator
    return import_ascend(f"{package}.eagle.speculator").AscendEagleSpeculator


def writes_lengths_before_forward(cls) -> bool:
    """Whether this generation writes the step's host lengths into its metadata before the forward (0.23.0)."""
    return hasattr(cls, "_ascend_prepare_decode_draft")


def accepts_without_a_uniform() -> bool:
    """Whether the checkout's probabilistic rejection kernel takes its acceptance test's uniform as the
    constant 0 (``u = tl.full([], 0.0, ...)``: 0.23.0 and v0.26.0rc; vllm-ascend #13470 draws it)."""
    kernel = import_ascend("vllm_ascend.worker.v2.spec_decode.rejection_sampler_utils")._probabilistic_rejection_kernel
    return "u = tl.full([], 0.0" in inspect.getsource(kernel.fn)  # the Triton kernel's Python function


@functools.cache
def speculator_name() -> str:
    """``0.23.0`` or ``main``: whose speculator this is, by what it does: 0.23.0 writes the host lengths
    before each step's forward, main does not."""
    return "0.23.0" if writes_lengths_before_forward(speculator_class()) else "main"


@functools.cache
def name() -> str:
    """``0.23.0``, ``0.26.0`` or ``main``: whose divergence table applies (``divergences.GENERATION``): the
    speculator's (``speculator_name``), except that main's with a rejection kernel that accepts without a
    uniform (v0.26.0rc, and main before #13470) is ``0.26.0``."""
    speculator = speculator_name()
    return "0.26.0" if speculator == "main" and accepts_without_a_uniform() else speculator


@contextlib.contextmanager
def propose_context(spec):
    """What this generation's ``propose`` runs under: vllm-ascend's ``build_attn_metadata`` in vLLM's place
    and its ``torch.gather``, both from the module that defines ``propose``."""
    module = sys.modules[type(spec).propose.__module__]
    with module.build_attn_metadata_wrapper(), module.torch_gather_wrapper():
        yield


def multi_step_decode(spec, num_reqs: int, batch_desc, seq_lens_upper_bound) -> None:
    """Draft steps 2..K as ``propose`` runs them after ``prepare_decode_inputs`` (attention not skipped)."""
    extra = (seq_lens_upper_bound,) if takes(spec._multi_step_decode, "seq_lens_cpu_upper_bound") else ()
    spec._multi_step_decode(num_reqs, False, batch_desc, None, *extra)


def _speculator_does_not_import() -> str | None:
    """Why this generation's ``init_speculator`` or the class the adapter reads its generation from does
    not import, or None."""
    try:
        init_speculator()
        speculator_class()
    except Exception as exc:  # noqa: BLE001 - any import failure means "not usable"; name it
        return f"{type(exc).__name__}: {exc}"
    return None


def _calls_use_dspark_its_vllm_lacks() -> str | None:
    config = import_ascend("vllm.config").SpeculativeConfig
    if not hasattr(config, "use_dspark") and "use_dspark()" in inspect.getsource(init_speculator()):
        return f"{config.__name__} has no use_dspark"
    return None


def _propose_takes_not_what_its_runner_hands() -> str | None:
    """Where the checkout's speculator overrides ``propose`` without the attention metadata vLLM's runner
    hands it by name (``attn_metadata=``, vLLM 0.18's ``GPUModelRunner``): what the call would raise."""
    importing.prepare()
    ascend = import_ascend("vllm_ascend.worker.v2.spec_decode.eagle").AscendEagleSpeculator.propose
    vllm = import_ascend("vllm.v1.worker.gpu.spec_decode.eagle.speculator").EagleSpeculator.propose
    handed = [name for name in inspect.signature(vllm).parameters if name != "self"]
    if "attn_metadata" not in handed:
        return None
    try:  # the runner's call by name, bound as Python binds it (nothing runs)
        inspect.signature(ascend).bind(None, **dict.fromkeys(handed))
    except TypeError as exc:
        return f"TypeError: {exc}"
    return None


def _rejection_sampler_does_not_import() -> str | None:
    try:
        import_ascend("vllm_ascend.worker.v2.spec_decode.rejection_sampler_utils")
    except ImportError as exc:
        return f"{type(exc).__name__}: {exc}"
    return None


# vLLM version -> (what its release branch's MRV2 speculator lacks there, measured on the branch, docs/upstream-ci.md
# "Every branch"; the check that it still does, naming what it found): the branch has no MRV2 speculator that
# runs on the vLLM it pairs with.
NOT_IN_CHECKOUT = {
    "0.18.0": (
        "releases/v0.18.0's MRV2 speculator overrides propose(input_batch, last_hidden_states, ...) without the "
        "attention metadata and slot mappings vLLM 0.18.0's runner hands it (attn_metadata=, slot_mappings=, "
        "draft_logits_out=), so the branch's speculator cannot be called by the vLLM it pairs with",
        _propose_takes_not_what_its_runner_hands,
    ),
    "0.20.2": (
        "releases/v0.20.2rc's MRV2 speculator imports PrefillEagleCudaGraphManager from "
        "vllm.v1.worker.gpu.spec_decode.eagle.cudagraph, which vLLM 0.20.2, the vLLM the branch pairs with, has not",
        _speculator_does_not_import,
    ),
    "0.21.0": (
        "releases/v0.21.0rc's MRV2 rejection sampler (worker/v2/spec_decode/rejection_sampler_utils.py) imports "
        "vllm.v1.worker.gpu.spec_decode.rejection_sampler_utils, which vLLM 0.21.0, the vLLM the branch pairs with, "
        "has not; the branch applies none of its MRV2 worker patches there (patch/worker/__init__.py: "
        '_V2_MODEL_RUNNER_SUPPORTED = not vllm_version_is("0.21.0"))',
        _rejection_sampler_does_not_import,
    ),
    "0.22.1": (
        "releases/v0.22.1rc's MRV2 speculator imports vllm.v1.worker.gpu.spec_decode.autoregressive, which vLLM "
        "0.22.1, the vLLM the branch pairs with, has not",
        _speculator_does_not_import,
    ),
    "0.24.0": (
        "releases/v0.24.0rc's init_speculator calls speculative_config.use_dspark() (vllm-ascend #11602), which "
        "vLLM 0.24.0, the vLLM the branch pairs with, has not",
        _calls_use_dspark_its_vllm_lacks,
    ),
}


def not_in_checkout() -> str | None:
    """Why the checkout has no MRV2 speculator to run, where that is a measured fact of its branch
    (``NOT_IN_CHECKOUT``, by the installed vLLM) and still holds; else None (the checkout's speculator is
    tested, or ``unavailable_reason`` says why not)."""
    if ascend_importing.unavailable_reason():
        return None
    cause, check = NOT_IN_CHECKOUT.get(import_ascend("vllm").__version__, (None, None))
    found = check() if check else None
    return f"{cause} ({found})" if found else None


def unavailable_reason() -> str | None:
    """Why vllm-ascend's MRV2 speculator cannot be tested here, or None: the kit's reasons (vllm-ascend does not import at all) first."""
    reason = ascend_importing.unavailable_reason()
    if reason:
        return reason
    failed = _speculator_does_not_import()
    if failed:
        return f"vllm-ascend's MRV2 speculator does not import: {failed}"
    try:
        import_ascend(AR)
    except ModuleNotFoundError as exc:
        return f"the adapter drives vLLM's autoregressive MRV2 speculator ({AR}, vLLM 0.23 on), which this vLLM has not: {exc}"
    return None
