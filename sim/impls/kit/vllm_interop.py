"""Conversions between the core's metadata and vLLM 0.33.0's, for vLLM as a second oracle.

vLLM (0.33.0, ``vllm/v1``) describes a propose call with a
``CommonAttentionMetadata`` (query_start_loc, seq_lens, block table, slot
mapping, with host copies), a ``SpecDecodeMetadata`` (drafts verified per
request) and, for step 1, the runner's request states (``get_token_id``) and
input batch (``req_ids``, ``num_tokens_no_spec``, ``vocab_size``). The core
carries the same facts in ``VerifiedBatch``, ``SampledTokens`` and
``FirstPassInputs``. What every vLLM release the adapters run agrees on (step 1's
inputs, ``SpecDecodeMetadata``, the first pass read back) is the kit's
(``sim.impls.kit.vllm_types``, re-exported here); this module adds the pin and
0.33's ``CommonAttentionMetadata``, copying tensors so that vLLM's in-place
updates (it lowers ``seq_lens`` inside ``propose``) never reach the caller's batch.

Why it lives beside the adapter, not in the core: only adapters and their
tests speak vLLM's types, and those types change from release to release
(vllm-ascend pins its own vLLM). The core stays free of any notion of vLLM.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from mtp.batch import FirstPassInputs, VerifiedBatch
from sim.impls.kit.vllm_types import (  # noqa: F401 - re-exported: the adapter's and its tests' one interop
    CPU_ENV,
    InputBatchView,
    RequestView,
    StepOneInputs,
    first_pass_from_vllm,
    import_vllm,
    to_spec_decode_metadata,
    to_step_one_inputs,
)

VLLM_VERSION = "0.33.0"


def unavailable_reason() -> str | None:
    """Why vLLM cannot serve as an oracle here, or None if it can."""
    try:
        vllm = import_vllm()
    except Exception as exc:  # noqa: BLE001 - any import failure means "not usable"; name it
        return f"import vllm failed: {type(exc).__name__}: {exc} (tox -e vllm installs it)"
    version = getattr(vllm, "__version__", "?")
    if version != VLLM_VERSION:
        return f"vllm {version} is installed; the oracle is pinned to {VLLM_VERSION}"
    return None


# ------------------------------------------------------------------ batch -> CommonAttentionMetadata
def _host_seq_lens_field(cls) -> str:
    """The field of vLLM's ``CommonAttentionMetadata`` that holds the host lengths: ``seq_lens_cpu_upper_bound``
    (vLLM 0.20 on), ``_seq_lens_cpu`` (vLLM 0.18, which vllm-ascend v0.18.0 pairs with)."""
    fields = {f.name for f in dataclasses.fields(cls)}
    return "seq_lens_cpu_upper_bound" if "seq_lens_cpu_upper_bound" in fields else "_seq_lens_cpu"


def host_seq_lens(batch: VerifiedBatch, first: FirstPassInputs) -> torch.Tensor:
    """The host copy of ``first``'s seq_lens: the batch's where no row was dropped (padded, or nothing
    rejected: the same lengths), else read back (unpadded mode, which reads the host anyway)."""
    if first.num_tokens == batch.num_tokens:
        return torch.as_tensor(np.asarray(batch.seq_lens_cpu))
    return first.seq_lens.cpu()


def to_common_attn_metadata(batch: VerifiedBatch, first: FirstPassInputs | None = None):
    """The target's ``CommonAttentionMetadata`` of a verified batch (fresh tensors); given ``first`` (steps
    1-2), of the first pass's rows: its offsets, lengths and slots."""
    backend = import_vllm("vllm.v1.attention.backend")
    qsl, qsl_cpu, seq_lens = batch.query_start_loc, np.asarray(batch.query_start_loc_cpu), batch.seq_lens
    slots, seq_lens_cpu = batch.slot_mapping[: batch.num_tokens], torch.as_tensor(np.asarray(batch.seq_lens_cpu))
    if first is not None:
        qsl, qsl_cpu, seq_lens = first.query_start_loc, np.asarray(first.query_start_loc_cpu), first.seq_lens
        slots, seq_lens_cpu = first.slot_mapping[: first.num_tokens], host_seq_lens(batch, first)
    seq_lens_cpu = seq_lens_cpu.to(torch.int32)
    return backend.CommonAttentionMetadata(
        query_start_loc=qsl.to(torch.int32).clone(),
        query_start_loc_cpu=torch.as_tensor(qsl_cpu, dtype=torch.int32),
        seq_lens=seq_lens.to(torch.int32).clone(),
        **{_host_seq_lens_field(backend.CommonAttentionMetadata): seq_lens_cpu},
        num_reqs=batch.num_reqs,
        num_actual_tokens=int(qsl_cpu[-1]),
        max_query_len=int(np.diff(qsl_cpu).max()),
        max_seq_len=int(seq_lens_cpu.max()),
        block_table_tensor=batch.block_table.to(torch.int32).clone(),
        slot_mapping=slots.to(torch.int64).clone(),
        causal=True,
    )
