"""vllm-ascend's own methods broken the way its history broke them, for the gate-catch tests and the
whole-gate runs of ``broken_gate``.

Each is ``breaking(original) -> broken`` for one method of the proposer (``functools.wraps`` keeps
the signature ``sim.impls.vllm_ascend.generation`` reads); ``metadata_breaks`` has the breaks of the
metadata a step's attention is handed.
"""

from __future__ import annotations

import functools
import inspect


def slot_plus_one(original):
    """``attn_update_stack_num_spec_norm``: every real slot advanced by one."""

    @functools.wraps(original)
    def broken(self, *args, **kwargs):
        cad, rest = original(self, *args, **kwargs)
        cad.slot_mapping = cad.slot_mapping + (cad.slot_mapping >= 0).to(cad.slot_mapping.dtype)
        return cad, rest

    return broken


def kernel_blocks_indexed_by_the_block_size(original):
    """``attn_update_stack_num_spec_norm``: each draft step's slots looked up in the runner's table of kernel
    blocks by the scheduler's block size, as a drafter that finds no linear-attention layers does (``has_gdn``
    false) and as every one did before vllm-ascend #7019 (Qwen3.5's MTP)."""

    @functools.wraps(original)
    def broken(self, *args, **kwargs):
        kept = self.has_gdn, self.kernel_block_size
        self.has_gdn, self.kernel_block_size = False, self.block_size
        try:
            return original(self, *args, **kwargs)
        finally:
            self.has_gdn, self.kernel_block_size = kept

    return broken


def sample_row_off_by_one(original):
    """``prepare_inputs_padded``: each sample row one row early."""

    @functools.wraps(original)
    def broken(self, *args, **kwargs):
        cad, rows, sample, rejected = original(self, *args, **kwargs)
        return cad, rows, sample - 1, rejected

    return broken


def first_valid_token(original):
    """``prepare_next_token_ids_padded``: the first valid sampled token taken for the last (the sampled tokens
    found by name: v0.18.0's takes the target's metadata first)."""
    signature = inspect.signature(original)

    @functools.wraps(original)
    def broken(self, *args, **kwargs):
        bound = signature.bind(self, *args, **kwargs)
        bound.arguments["sampled_token_ids"] = bound.arguments["sampled_token_ids"][:, :1].contiguous()
        return original(*bound.args, **bound.kwargs)

    return broken


def reads_rejected_counts_back(original):
    """``prepare_inputs_padded``: a device sync (the rejected counts read back), the values unchanged."""

    @functools.wraps(original)
    def broken(self, *args, **kwargs):
        cad, rows, sample, rejected = original(self, *args, **kwargs)
        if int(rejected.max()) > 0:
            sample = sample.clone()
        return cad, rows, sample, rejected

    return broken


def host_mirror_read_before_its_copy_lands(synced: bool = False):
    """``prepare_inputs_padded``: the host mirror ``seq_lens_cpu`` rebuilt from the device ``seq_lens`` by a
    non-blocking device->host copy (``t.to("cpu", non_blocking=True)``, made by vllm-ascend itself, not
    through the ``Device`` API) and handed on at once, before any synchronize: bug class 6, the early
    read of vllm-ascend#4254. ``synced``: the correct code, ``torch.npu.synchronize()`` before the
    mirror is handed on (same values: the gate must pass it)."""

    def breaking(original):
        @functools.wraps(original)
        def broken(self, *args, **kwargs):
            import torch

            cad, *rest = original(self, *args, **kwargs)
            cad.seq_lens_cpu = cad.seq_lens.to("cpu", non_blocking=True)
            if synced:
                torch.npu.synchronize()
            return (cad, *rest)

        return broken

    return breaking


def outputs_swapped(original):
    """``maybe_all_gather_and_unpad``, which every forward's two outputs pass through: the state to compute
    logits from and the state to feed back exchanged, as a proposer that unpacks the draft model's
    ``(logit_hidden, recycle_hidden)`` the other way round."""

    @functools.wraps(original)
    def broken(self, last_hidden_states, positions, hidden_states=None):
        if hidden_states is None:
            return original(self, last_hidden_states, positions, hidden_states)
        return original(self, hidden_states, positions, last_hidden_states)

    return broken


def draft_model_host_lengths_not_grown(original):
    """``set_inputs_first_pass`` of a draft model: the host mirrors of seq_lens left as the target's (vLLM's
    ``extend_all_queries_by_N`` alone, without vllm-ascend's ``+ N`` of its own mirrors, which its NPU
    attention backends read)."""

    @functools.wraps(original)
    def broken(self, *args, **kwargs):
        num_tokens, sample, cad, rest = original(self, *args, **kwargs)
        if self.needs_extra_input_slots:
            for name in ("_seq_lens_cpu", "seq_lens_cpu"):
                if getattr(cad, name, None) is not None:
                    setattr(cad, name, getattr(cad, name) - self.net_num_new_slots_per_request)
        return num_tokens, sample, cad, rest

    return broken
