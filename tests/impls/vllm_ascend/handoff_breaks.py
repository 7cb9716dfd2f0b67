"""Broken hand-offs from vllm-ascend's runner to its drafter, and a broken drafter setup, as a
regression there would bring them: each takes the original method and returns the broken one.

``positions_off_by_one`` breaks ``_get_positions`` (vLLM's ``GPUModelRunner``'s, which
``NPUModelRunner`` inherits and ``propose_draft_token_ids`` gathers the target's positions with);
``num_scheduled_tokens_short`` is a runner whose ``execute_model`` hands
``propose_draft_token_ids`` one scheduled token too few (what it slices the target's rows by when
no request verified drafts); ``prefill_state_with_any_new_request`` is a runner whose
``_build_attn_state`` says ``PrefillNoCache`` when any request of the batch is new, not every one;
``block_size_from_the_first_group`` is a drafter whose ``initialize_attn_backend`` takes its block
size from the wrong KV-cache group; ``aux_layers_reversed`` a runner that hands an EAGLE-3 drafter
the target's auxiliary layers in another order than the head folds them;
``one_token_batches_as_new_prompts`` a runner that labels a decode node's first step (one token per
request, the prompts' KV transferred) as new prompts.

Under asynchronous scheduling: ``count_copy_waits_on_its_own_stream`` is vllm-ascend#9456's
``_copy_valid_sampled_token_count``, which takes ``current_stream()`` inside its copy stream's
``with`` and so waits on the copy stream itself, not on the stream that computed the counts;
``counts_read_before_their_event`` a ``_correct_optimistic_seq_lens_cpu`` that reads the host counts
without synchronizing the copy's event; ``counts_of_the_same_row`` one whose rows take their counts
and draft counts from the step before's rows in their old order, as if no surviving request had moved
(#13864's stale counts after condensing); ``placeholders_reach_the_model`` a ``_prepare_input_ids``
that leaves the scheduler's placeholders where the previous step's drafts go (as if the runner kept no
drafts), so the next step verifies no token; ``new_rows_corrected_as_the_first`` a device-side
correction (``update_num_computed_tokens_for_batch_change``) that clamps a new request's missing row
to row 0 and corrects it as that request. ``count_copy_on_the_current_stream`` is no break: a copy on
the stream that computed the counts, recorded there, is ordered without a side stream, and the gate
must pass it; nor is ``correction_per_request``, the correction written as a loop over the next
step's rows.

A padded target step (a FULL graph's): ``unpadded_keeps_the_phantom_requests`` is an
``AscendCommonAttentionMetadata.unpadded`` that hands the drafter the padded step's phantom requests.
``unpadded_slices_the_table_and_slots`` is no break: vllm-ascend #7755's ``unpadded``, which slices the
block table and the slots to the batch; the drafter pads them itself, and the gate must pass it.

``never_prefill_no_cache`` is no break: a runner that says ``ChunkedPrefill`` where vllm-ascend's
says ``PrefillNoCache`` reads the cache, which holds a new prompt's own KV, so it drafts the same;
the gate must pass it (the check is of a state that contradicts the batch, not of the runner's choice).
"""

from __future__ import annotations

import numpy as np
import torch

from sim.impls.kit.in_place import in_place_of


def positions_off_by_one(original):
    def broken(self, num_tokens):
        return original(self, num_tokens) + 1

    return broken


def num_scheduled_tokens_short(original):
    def broken(self, *args, num_scheduled_tokens, **kwargs):
        return original(self, *args, num_scheduled_tokens=num_scheduled_tokens - 1, **kwargs)

    return broken


def aux_layers_reversed(original):
    """``propose_draft_token_ids`` handed the target's auxiliary hidden states (eagle3) last layer first:
    what a runner capturing other layers than the head was trained on hands it."""

    def broken(self, *args, aux_hidden_states=None, **kwargs):
        layers = None if aux_hidden_states is None else aux_hidden_states[::-1]
        return original(self, *args, aux_hidden_states=layers, **kwargs)

    return broken


def prefill_state_with_any_new_request(original):
    def broken(self, num_reqs, num_scheduled_tokens, num_valid_tokens):
        state = original(self, num_reqs, num_scheduled_tokens, num_valid_tokens)
        if (self.input_batch.num_computed_tokens_cpu[:num_reqs] == 0).any():
            state = self.attn_state = type(state).PrefillNoCache
        return state

    return broken


def one_token_batches_as_new_prompts(original):
    """``_build_attn_state`` saying ``PrefillNoCache`` for a batch whose every query is one token (its
    prefill/decode-split branch: a decode node's first step, transferred prompts and no drafts yet, or
    decodes left no room for drafts at ``max_model_len``), as if those requests had no context."""

    def broken(self, num_reqs, num_scheduled_tokens, num_valid_tokens):
        state = original(self, num_reqs, num_scheduled_tokens, num_valid_tokens)
        if (num_scheduled_tokens == 1).all():
            state = self.attn_state = type(state).PrefillNoCache
        return state

    return broken


def never_prefill_no_cache(original):
    def control(self, num_reqs, num_scheduled_tokens, num_valid_tokens):
        state = original(self, num_reqs, num_scheduled_tokens, num_valid_tokens)
        if state == type(state).PrefillNoCache:
            state = self.attn_state = type(state).ChunkedPrefill
        return state

    return control


def kernel_blocks_of_the_next_block(original):
    """``BlockTable._convert_physical_to_logical_blocks``: each block's kernel blocks taken one further on, the
    last of them the next block's first."""

    def broken(self, physical_blocks):
        return original(self, physical_blocks) + 1

    return broken


def block_size_from_the_first_group(original):
    """``initialize_attn_backend`` (the drafter's setup from the runner's KV-cache config) that takes
    ``block_size`` from the config's first group, not the draft layers' group; and the kernel block size
    ``load_model`` set before, which the step slots take instead on v0.21.0rc and v0.22.1rc."""

    def broken(self, kv_cache_config, *args, **kwargs):
        original(self, kv_cache_config, *args, **kwargs)
        self.block_size = self.kernel_block_size = kv_cache_config.kv_cache_groups[0].kv_cache_spec.block_size

    return broken


def count_copy_waits_on_its_own_stream(original):
    def broken(self, *args, **kwargs):
        inside = getattr(self, "valid_sampled_token_count_copy_stream", None)  # current_stream() inside its with
        with in_place_of(torch.npu, "current_stream", lambda *_: inside):
            return original(self, *args, **kwargs)

    return broken


def count_copy_on_the_current_stream(original):
    def control(self, *args, **kwargs):
        if self.valid_sampled_token_count_event is None:
            return original(self, *args, **kwargs)
        with in_place_of(self, "valid_sampled_token_count_copy_stream", torch.npu.current_stream()):
            return original(self, *args, **kwargs)

    return control


class _NoWait:
    def synchronize(self) -> None: ...


def counts_read_before_their_event(original):
    def broken(self, num_reqs):
        with in_place_of(self, "valid_sampled_token_count_event", _NoWait()):
            return original(self, num_reqs)

    return broken


def counts_of_the_same_row(original):
    def broken(self, num_reqs):
        before = self.prev_positions.np[:num_reqs]
        kept = before >= 0
        before[kept] = np.sort(before[kept])  # the surviving rows' rows before, in their old order
        return original(self, num_reqs)

    return broken


def placeholders_reach_the_model(original):
    def broken(self, *args, **kwargs):
        with in_place_of(self, "_draft_token_ids", None):
            return original(self, *args, **kwargs)

    return broken


def correction_per_request(original):
    def control(self, num_reqs):
        self.valid_sampled_token_count_event.synchronize()
        counts = self.valid_sampled_token_count_cpu.tolist()
        for row in range(num_reqs):
            before = int(self.prev_positions.np[row])
            drafts = int(self.prev_num_draft_tokens.np[before]) if before >= 0 else 0
            if drafts:
                self.optimistic_seq_lens_cpu[row] -= drafts + 1 - counts[before]

    return control


def new_rows_corrected_as_the_first(original):
    def broken(num_computed, num_accepted, prev_positions, *args):
        return original(num_computed, num_accepted, prev_positions.clamp(min=0), *args)

    return broken


def unpadded_keeps_the_phantom_requests(original):
    """``AscendCommonAttentionMetadata.unpadded`` that keeps a padded step's phantom requests: the drafter
    handed the metadata at the padded request count, as if the runner handed it the padded build."""

    def broken(self, num_actual_tokens, num_actual_reqs):
        return original(self, num_actual_tokens, self.num_reqs)

    return broken


def unpadded_slices_the_table_and_slots(original):
    """No break: ``unpadded`` that slices the block table to the batch's requests and the slot mapping to
    its tokens, as vllm-ascend #7755 proposes (Ascend A5's FIA checks the table's rows against the
    requests); the drafter pads both itself where its graph needs them, and the gate must pass it."""

    def sliced(self, num_actual_tokens, num_actual_reqs):
        out = original(self, num_actual_tokens, num_actual_reqs)
        out.block_table_tensor = out.block_table_tensor[:num_actual_reqs]
        out.slot_mapping = out.slot_mapping[:num_actual_tokens]
        return out

    return sliced
