"""vLLM's types as the core's, where a vLLM-based proposer's generations agree: the versioned builders shared.

Every proposer built on vLLM V1's spec-decode types (vLLM's ``EagleProposer``, vllm-ascend's
proposers, 0.13.0 to main) takes step 1's request states (``get_token_id``) and input batch
(``req_ids``, ``num_tokens_no_spec``, ``vocab_size``), a ``SpecDecodeMetadata`` for the verified
drafts, and returns spec metadata the core reads back as ``FirstPassInputs``. Those conversions
are alike in every release the adapters run, so they are here once; what differs by release (the
``CommonAttentionMetadata`` fields, vllm-ascend's metadata class) stays in each adapter's
``interop``. Every tensor handed over is fresh, so upstream in-place writes never reach the
caller's batch.

vllm is imported inside the functions only: importing this module costs nothing and works
without vllm. ``import_vllm`` sets the environment vLLM needs on a CPU-only machine first, and guards
the interpreter's kernel launches (``kernel_bounds``).
"""

from __future__ import annotations

import importlib
import os
from dataclasses import dataclass, field
from types import SimpleNamespace

import numpy as np
import torch

from mtp.batch import FirstPassInputs, SampledTokens, VerifiedBatch
from sim.impls.kit import kernel_bounds

# vLLM on a CPU-only machine: CPU platform, no CUDA probing, Triton kernels interpreted.
CPU_ENV = {"VLLM_TARGET_DEVICE": "cpu", "CUDA_VISIBLE_DEVICES": "", "TRITON_INTERPRET": "1"}

# The sampling metadata of greedy drafting: every V1 proposer here reads only ``all_greedy`` of it
# (vllm-ascend: with enable_reduce_sample off).
GREEDY = SimpleNamespace(all_greedy=True)


def import_vllm(module: str = "vllm"):
    """Import ``module`` of vllm after setting ``CPU_ENV`` defaults (a caller's values win)."""
    for key, value in CPU_ENV.items():
        os.environ.setdefault(key, value)
    kernel_bounds.install()
    return importlib.import_module(module)


def to_spec_decode_metadata(batch: VerifiedBatch):
    """vLLM's ``SpecDecodeMetadata``: request r verified the ``k_r`` ids after its first query row."""
    metadata = import_vllm("vllm.v1.spec_decode.metadata")
    qsl = np.asarray(batch.query_start_loc_cpu)
    ids = batch.token_ids.tolist()
    drafts = [ids[qsl[r] + 1 : qsl[r] + 1 + int(k)] for r, k in enumerate(batch.num_draft_tokens_cpu)]
    return metadata.SpecDecodeMetadata.make_dummy(drafts, batch.token_ids.device)


# ------------------------------------------------------------------ spec metadata -> FirstPassInputs
def first_pass_from_vllm(
    cad,
    token_indices: torch.Tensor,
    sample_indices: torch.Tensor,
    num_rejected: torch.Tensor,
    slot_buffer_len: int,
    padded: bool,
) -> FirstPassInputs:
    """The core's ``FirstPassInputs`` from vLLM's spec metadata and indices.

    ``accepted_seq_lens``: padded, ``seq_lens - num_rejected`` (vLLM lowers its
    ``seq_lens`` by that amount before step 2); unpadded, ``seq_lens`` itself
    (``prepare_inputs`` already dropped the rejected tokens).
    """
    n = cad.num_actual_tokens
    slots = torch.full((slot_buffer_len,), -1, dtype=torch.int64, device=cad.slot_mapping.device)
    slots[:n] = cad.slot_mapping[:n]
    seq_lens = cad.seq_lens.clone()
    return FirstPassInputs(
        token_indices=token_indices.to(torch.int64),
        query_start_loc=cad.query_start_loc.clone(),
        query_start_loc_cpu=cad.query_start_loc_cpu.numpy().astype(np.int64),
        seq_lens=seq_lens,
        accepted_seq_lens=(seq_lens - num_rejected if padded else seq_lens).to(torch.int32),
        slot_mapping=slots,
        sample_indices=sample_indices.to(torch.int64),
        num_rejected=num_rejected.to(torch.int32),
        max_query_len=int(cad.max_query_len),
    )


# ------------------------------------------------------------------ SampledTokens -> request states
@dataclass
class RequestView:
    """The part of vLLM's ``CachedRequestState`` that step 1 reads.

    ``tokens`` maps a position to the request's token id there (prompt plus
    outputs, no drafts); ``asked`` records every position vLLM looked up, so a
    test sees which token vLLM took as the backup.
    """

    num_computed_tokens: int
    tokens: dict[int, int]
    asked: list[int] = field(default_factory=list)

    def get_token_id(self, idx: int) -> int:
        self.asked.append(int(idx))
        return self.tokens.get(int(idx), -1)


@dataclass
class InputBatchView:
    """The part of vLLM's ``InputBatch`` that step 1 reads."""

    req_ids: list[str]
    num_tokens_no_spec: np.ndarray
    vocab_size: int

    @property
    def num_reqs(self) -> int:
        return len(self.req_ids)


@dataclass
class StepOneInputs:
    """What vLLM's ``prepare_next_token_ids_*`` take, for one batch."""

    requests: dict[str, RequestView]
    input_batch: InputBatchView
    discard_mask: torch.Tensor  # bool [B] device
    num_scheduled: dict[str, int]
    sampled_lists: list[list[int]] | None  # unpadded form; discarded requests have []


def to_step_one_inputs(
    batch: VerifiedBatch, sampled: SampledTokens, vocab_size: int, num_tokens_no_spec: np.ndarray | None = None
) -> StepOneInputs:
    """vLLM's step-1 inputs for a batch.

    The core's ``backup`` is the request's token at ``seq_len``. vLLM's padded
    path takes ``get_token_id(num_tokens_no_spec - 1)`` instead (divergence
    ``backup-token`` in docs/DIVERGENCES.md). By default the request is
    described as knowing exactly ``seq_len + 1`` tokens (``num_tokens_no_spec
    = seq_len + 1``), the only count a ``VerifiedBatch`` determines; then both
    lookups land on the backup. Pass ``num_tokens_no_spec`` to describe a real
    runner state (every position at or past ``seq_len`` holds the backup).
    """
    seq_lens = np.asarray(batch.seq_lens_cpu, dtype=np.int64)
    qlens = batch.query_lens_cpu
    known = seq_lens + 1 if num_tokens_no_spec is None else np.asarray(num_tokens_no_spec, dtype=np.int64)
    backup = np.asarray(sampled.backup, dtype=np.int64)
    req_ids = [f"r{r}" for r in range(batch.num_reqs)]
    requests = {}
    for r, rid in enumerate(req_ids):
        top = max(int(known[r]), int(seq_lens[r]) + 1)
        requests[rid] = RequestView(
            num_computed_tokens=int(seq_lens[r] - qlens[r]),
            tokens={p: int(backup[r]) for p in range(int(seq_lens[r]), top)},
        )
    lists = None
    if sampled.lists is not None:
        lists = [[] if d else list(ids) for ids, d in zip(sampled.lists, sampled.discarded)]
    discarded = np.asarray(sampled.discarded, dtype=bool)
    return StepOneInputs(
        requests=requests,
        input_batch=InputBatchView(req_ids, known.astype(np.int32), vocab_size),
        discard_mask=torch.from_numpy(discarded.copy()).to(batch.query_start_loc.device),
        num_scheduled={rid: int(q) for rid, q in zip(req_ids, qlens)},
        sampled_lists=lists,
    )


def discard_indices(sampled: SampledTokens, device: torch.device) -> tuple[torch.Tensor, int]:
    """vllm-ascend's runner's ``discard_request_indices`` (int64, device) and ``num_discarded_requests``."""
    idx = np.flatnonzero(np.asarray(sampled.discarded, dtype=bool))
    return torch.as_tensor(idx, dtype=torch.int64).to(device), int(idx.size)
