"""The core's metadata as vllm-ascend's types (``AscendCommonAttentionMetadata``, discard indices).

vllm-ascend's runner hands its proposer an ``AscendCommonAttentionMetadata``:
vLLM's ``CommonAttentionMetadata`` plus the host mirrors NPU kernels read
(``seq_lens_cpu``, ``num_computed_tokens_cpu``, ``positions``). Step 1 takes
the discarded requests as an index tensor and a count, not a mask (the kit's
``discard_indices``). The fields vLLM also has come from ``sim.impls.kit.vllm_interop``
(the same conversion, imported after ``importing.prepare()``); the rest are added
here; what every generation shares is the kit's (``sim.impls.kit.vllm_types``). Every
tensor is fresh, so in-place writes never reach the caller's batch.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import torch

from mtp.batch import VerifiedBatch
from sim.impls.kit import vllm_interop, vllm_types
from sim.impls.kit.ascend.importing import import_ascend


def to_ascend_metadata(batch: VerifiedBatch, seq_lens_cpu=None):
    """The target's ``AscendCommonAttentionMetadata`` of a verified batch, as the eager runner fills it; its
    ``seq_lens_cpu`` the host lengths a runner hands (``seq_lens_cpu``, per request) where given, else the batch's."""
    utils = import_ascend("vllm_ascend.attention.utils")
    cad = vllm_interop.to_common_attn_metadata(batch)
    fields = {f.name: getattr(cad, f.name) for f in dataclasses.fields(cad) if f.init}
    host = batch.seq_lens_cpu if seq_lens_cpu is None else seq_lens_cpu
    computed = torch.as_tensor(np.asarray(batch.seq_lens_cpu) - np.asarray(batch.query_lens_cpu), dtype=torch.int32)
    fields.update(
        seq_lens_cpu=torch.as_tensor(np.asarray(host), dtype=torch.int32).clone(),
        num_computed_tokens_cpu=computed,
        positions=batch.positions[: batch.num_tokens].clone(),
        positions_cpu=batch.positions[: batch.num_tokens].cpu().clone(),
        num_input_tokens=batch.num_tokens,
    )
    # v0.18.0's runner sets neither host positions (its metadata has none) nor vLLM 0.18's _seq_lens_cpu
    fields.pop("_seq_lens_cpu", None)
    if "positions_cpu" not in {f.name for f in dataclasses.fields(utils.AscendCommonAttentionMetadata)}:
        del fields["positions_cpu"]
    return utils.AscendCommonAttentionMetadata(**fields)


def reads_no_cached_context(attn_state) -> bool:
    """Whether vllm-ascend's FIA kernels read no cached context in ``attn_state`` (``_get_fia_params``:
    ``PrefillNoCache`` attends over the forward's own keys only)."""
    return attn_state == import_ascend("vllm_ascend.attention.attention_v1").AscendAttentionState.PrefillNoCache


discard_indices = vllm_types.discard_indices
to_spec_decode_metadata = vllm_types.to_spec_decode_metadata
to_step_one_inputs = vllm_types.to_step_one_inputs
first_pass_from_vllm = vllm_types.first_pass_from_vllm
