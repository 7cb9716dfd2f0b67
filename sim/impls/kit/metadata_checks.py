"""Two checks on the attention metadata an implementation hands its attention backend.

- Host mirrors, at build: every host copy of a device tensor that the
  implementation's ``CommonAttentionMetadata`` carries (``query_start_loc_cpu``;
  vllm-ascend's ``seq_lens_cpu`` and ``_seq_lens_cpu``) must equal it over the live
  rows. (vllm-ascend's ``num_computed_tokens_cpu`` mirrors no device tensor: it is
  recorded with each step and compared with the reference, ``RecordedMeta``.) NPU kernels take their lengths from the host,
  so a mirror not advanced with its device tensor (vllm-ascend #3300) feeds
  attention stale lengths while the device side, which the gate also compares,
  looks right.
- Unchanged until the forward: backends keep views of the metadata's tensors,
  not copies, and vllm-ascend builds every step's metadata before the first
  forward. ``Built`` keeps the views a step's attention holds and a copy of
  their values at build; ``check_unchanged`` compares them when that step's
  forward runs, so a tensor written in place in between (one step's update
  writing into the buffer an earlier step holds: cross-step aliasing,
  vllm-ascend #7549) fails by name.

- One KV-cache group, one view: the draft layers of one KV-cache group share its block table and
  slots, and every layer sees the same step's lengths, whatever attention group (backend) built
  its metadata; ``check_same_step`` compares each further layer's with the first layer's when
  the forward reads them.

Any failure is a ``MetadataMismatch`` (an ``AssertionError``: the gate's
checks fail with it) naming the step, the field and both values. ``host_seq_lens`` is what
vllm-ascend's backends read of the lengths (every vllm-ascend adapter's attention takes it).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from mtp.model import AttentionMeta


class MetadataMismatch(AssertionError):
    """The metadata a step's attention holds contradicts itself, or changed after it was built."""


# (host mirror, the device tensor it mirrors, live entries past num_reqs: 1 for a [B+1] offsets tensor)
MIRRORS = (
    ("query_start_loc_cpu", "query_start_loc", 1),
    ("seq_lens_cpu", "seq_lens", 0),
    ("_seq_lens_cpu", "seq_lens", 0),
)


def _values(t: torch.Tensor, n: int) -> list[int]:
    return t[:n].to("cpu", torch.int64).tolist()


def present(cad, name: str):
    """``cad.name`` when the metadata has that field and it is set, else None (vLLM 0.23's ``seq_lens_cpu``
    is a property that syncs: only the fields in the object's own dict are read). A field set to anything
    but a tensor is refused by name, so no stand-in is ever taken for a checked mirror."""
    value = vars(cad).get(name)
    if value is not None and not isinstance(value, torch.Tensor):
        raise TypeError(f"{name}: a {type(value).__name__}, not a tensor")
    return value


def host_seq_lens(cad) -> torch.Tensor:
    """The host lengths vllm-ascend's builders read: ``_seq_lens_cpu``, else ``seq_lens_cpu``, else the device's."""
    for name in ("_seq_lens_cpu", "seq_lens_cpu"):
        value = present(cad, name)
        if value is not None:
            return value
    return cad.seq_lens.cpu()


def _label(step: int | None) -> str:
    return f"step {step}" if step is not None else "a step"  # MRV2's builder is not told the step


def check_mirrors(cad, step: int | None) -> None:
    """Each host mirror ``cad`` carries equals its device tensor over the ``cad.num_reqs`` live requests."""
    n = int(cad.num_reqs)
    for host_name, device_name, extra in MIRRORS:
        host, device = present(cad, host_name), present(cad, device_name)
        if host is None or device is None:
            continue
        got, want = _values(host, n + extra), _values(device, n + extra)
        if got != want:
            raise MetadataMismatch(
                f"{_label(step)}: host mirror {host_name} is not {device_name} over the {n + extra} live rows: "
                f"got {got}, want {want}"
            )


@dataclass
class Built:
    """The tensors (and host lists) one step's attention holds, as a backend keeps them, and their values at build."""

    step: int | None
    views: dict[str, torch.Tensor | list]
    at_build: dict[str, torch.Tensor | list] = field(default_factory=dict)

    def __post_init__(self):
        self.at_build = {k: list(v) if isinstance(v, list) else v.detach().clone() for k, v in self.views.items()}


COMPUTED = "num_computed_tokens_cpu"  # vllm-ascend's host count of the tokens before each query


@dataclass
class RecordedMeta(AttentionMeta):
    """The ``AttentionMeta`` a recording attention group builds, with what it held at build, the
    ``COMPUTED`` count it was handed over the live requests (None where the metadata has none) and, where
    the metadata carries the rotation (MLA's cos/sin), the position each row is rotated at (else None:
    the model rotates by its own positions)."""

    built: Built | None = None
    num_computed_tokens: torch.Tensor | None = None
    rope_positions: torch.Tensor | None = None


def check_unchanged(built: Built, step: int) -> None:
    """Every tensor ``built`` holds has the values it had at build, now that step ``step``'s forward runs."""
    for name, view in built.views.items():
        before = built.at_build[name]
        if isinstance(view, list):
            changed = view != before
        else:
            changed = view.shape != before.shape or not torch.equal(view, before)
        if changed:
            now, then = (view, before) if isinstance(view, list) else (view.tolist(), before.tolist())
            raise MetadataMismatch(
                f"step {step}: {name} changed between build and forward: at forward {now}, at build {then}"
            )


def check_no_context(step: int, attn: AttentionMeta) -> None:
    """An attention that reads no cached context (``own_rows_only``: vllm-ascend's ``PrefillNoCache``)
    is handed no request with tokens before its rows of this forward."""
    if not attn.own_rows_only:
        return
    queries = (attn.query_start_loc[1:] - attn.query_start_loc[:-1]).tolist()
    before = {r: n - q for r, (n, q) in enumerate(zip(attn.seq_lens.tolist(), queries)) if n > q}
    if before:
        raise MetadataMismatch(
            f"step {step}: the attention reads no cached context (attn_state PrefillNoCache), but requests "
            f"{list(before)} have {list(before.values())} tokens before their rows (seq_lens minus the query "
            "lengths): their attention loses that prefix"
        )


SHARED = ("query_start_loc", "seq_lens", "block_table", "slot_mapping")  # what a KV-cache group's layers share


def check_same_step(step: int, layer: str, attn: AttentionMeta, first_layer: str, first: AttentionMeta) -> None:
    """``layer``'s metadata at step ``step`` holds what ``first_layer``'s does: the same table, slots and lengths."""
    for name in SHARED:
        got, want = getattr(attn, name), getattr(first, name)
        if got.shape != want.shape or not torch.equal(got.to(want.dtype), want):
            raise MetadataMismatch(
                f"step {step}: layer {layer} is given {name} {got.tolist()}, layer {first_layer} {want.tolist()}: "
                "the draft's layers of one KV-cache group attend with one step's metadata"
            )
