"""The code vllm-ascend's MRV2 speculator runs, broken as a regression there would break it, for
``test_gate_catches`` and the whole-gate runs of ``broken_gate`` (``broken_gate.VARIANTS``): each takes
the original function or method and returns the broken one. vLLM's MRV2 kernels' wrappers and
``BlockTables`` (what vllm-ascend's speculator runs), vllm-ascend's own host-length update, its MRV2 runner's
postprocess and host-length layout (what it hands the speculator), or the checkout's attention metadata builder its
``build_attn_metadata`` asks.
"""

from __future__ import annotations

import contextlib
import copy
import functools

import torch

from sim.impls.kit.ascend.importing import import_ascend
from tests.impls.fixes import edited, edited_everywhere


def positions_not_advanced(update_draft_inputs):
    """``update_draft_inputs`` whose step leaves the positions as they were: steps 3..K repeat step 2's
    position (and slot)."""

    @functools.wraps(update_draft_inputs)
    def broken(draft_tokens, current_draft_step, hidden_states, output_draft_tokens, next_input_hidden_states,
               input_buffers, num_reqs, *args, **kwargs):  # fmt: skip
        before = input_buffers.positions[:num_reqs].clone()
        update_draft_inputs(draft_tokens, current_draft_step, hidden_states, output_draft_tokens,
                            next_input_hidden_states, input_buffers, num_reqs, *args, **kwargs)  # fmt: skip
        input_buffers.positions[:num_reqs] = before

    return broken


def request_states_of_the_batch_rows(prepare_prefill_inputs):
    """``prepare_prefill_inputs`` reading each request's state (the token it continues from, its next prompt token)
    at its batch row, not its request-state row (``idx_mapping``): a runner hands rows out as requests arrive, so
    each request continues from another's token. Invisible where state row r is batch row r."""

    @functools.wraps(prepare_prefill_inputs)
    def broken(last_token_indices, current_draft_step, input_buffers, input_batch, *args, **kwargs):
        by_row = copy.copy(input_batch)
        by_row.idx_mapping = torch.arange(input_batch.num_reqs, dtype=input_batch.idx_mapping.dtype)
        return prepare_prefill_inputs(last_token_indices, current_draft_step, input_buffers, by_row, *args, **kwargs)

    return broken


def host_lengths_read_before_their_event(update_seq_lens_cpu):
    """The runner's ``_update_seq_lens_cpu`` not waiting for its copy's event: the host lengths are laid out from
    counts the copy stream has not landed (vllm-ascend#9456's class, on MRV2)."""
    return edited_everywhere(update_seq_lens_cpu, r"(\n\s*)self\.num_computed_tokens_event\.synchronize\(\)", r"\1pass")


def host_lengths_of_the_batch_rows(update_seq_lens_cpu):
    """The runner's ``_update_seq_lens_cpu`` taking each request's copied count at its batch row, not its
    request-state row: each request's host length is another's count plus its own query."""
    return edited_everywhere(
        update_seq_lens_cpu,
        r"= self\.num_computed_tokens_cpu\[req_index\]",
        "= self.num_computed_tokens_cpu[scheduler_output.scheduled_cached_reqs.req_ids.index(req_id)]",
    )


def host_counts_copied_before_the_postprocess(postprocess_sampled):
    """The runner's ``postprocess_sampled`` copying the device's counts to the host before vLLM's ``post_update``
    lowers them by the rejected drafts (the copy issued first, none after): the next step's host lengths count
    every draft as accepted."""

    @functools.wraps(postprocess_sampled)
    def broken(self, *args, **kwargs):
        self._copy_num_computed_tokens_to_cpu()
        self._copy_num_computed_tokens_to_cpu = lambda: None
        try:
            return postprocess_sampled(self, *args, **kwargs)
        finally:
            del self._copy_num_computed_tokens_to_cpu

    return broken


def next_step_drafts_of_the_batch_rows(combine_sampled_and_draft_tokens):
    """The runner's ``combine_sampled_and_draft_tokens`` reading each next-step row's last sampled token and drafts at
    its batch row, not its request-state row: a condensed or reordered step continues each request from another's
    token and verifies another's drafts."""

    @functools.wraps(combine_sampled_and_draft_tokens)
    def broken(input_ids, idx_mapping, *args, **kwargs):
        rows = torch.arange(idx_mapping.shape[0], dtype=idx_mapping.dtype, device=idx_mapping.device)
        return combine_sampled_and_draft_tokens(input_ids, rows, *args, **kwargs)

    return broken


def slots_one_position_back(compute_slot_mappings):
    """``BlockTables.compute_slot_mappings`` told each position minus one: every step writes its KV at the
    slot of the position before (over the previous step's, or the last accepted token's)."""

    @functools.wraps(compute_slot_mappings)
    def broken(self, idx_mapping, query_start_loc, positions, *args, **kwargs):
        return compute_slot_mappings(self, idx_mapping, query_start_loc, positions - 1, *args, **kwargs)

    return broken


def host_seq_lens_not_advanced(calc_next_seq_lens_cpu):
    """0.23.0's ``_calc_next_seq_lens_cpu`` that does not add the step: the host lengths the attention
    reads stay at the target's seq_len (0.23.0 writes them before the forward; main only after it,
    where nothing reads them, so there the break changes nothing)."""

    @functools.wraps(calc_next_seq_lens_cpu)
    def broken(self, seq_lens_cpu, num_reqs, num_reqs_padded, step):
        return calc_next_seq_lens_cpu(self, seq_lens_cpu, num_reqs, num_reqs_padded, 0)

    return broken


def decode_steps_labelled_prefill_no_cache(label_decode_steps):
    """The speculator's labelling of its draft steps' metadata (0.23.0's ``_init_decode_attn_metadata``,
    main's ``_build_draft_attn_metadata``: each forces ``DecodeOnly``) saying ``PrefillNoCache``: each
    step's one row would attend to itself alone, none of its request's cached context."""

    @functools.wraps(label_decode_steps)
    def broken(self, *args, **kwargs):
        built = label_decode_steps(self, *args, **kwargs)
        metadata = built if isinstance(built, dict) else (args[0] if args else kwargs.get("attn_metadata"))
        states = import_ascend("vllm_ascend.attention.attention_v1").AscendAttentionState
        for meta in (metadata or {}).values():
            if meta is not None:
                meta.attn_state = states.PrefillNoCache
        return built

    return broken


def query_starts_as_ends(build):
    """``AscendAttentionMetadataBuilder.build`` handing the kernels each request's query start where its end
    belongs (``actual_seq_lengths_q`` one request back): every request attends with the rows of the one before."""
    return edited(
        build,
        (
            "actual_seq_lengths_q = query_start_loc_cpu[1:].tolist()",
            "actual_seq_lengths_q = query_start_loc_cpu[:-1].tolist()",
        ),
    )


def kernel_blocks_one_further_on(append_block_ids):
    """vLLM's ``BlockTables.append_block_ids`` (the MRV2 runner's conversion of a hybrid target's blocks into kernel
    blocks) taking each block's kernel blocks one further on, the last of them the next block's first."""
    return edited(
        append_block_ids,
        (
            "block_ids = [b * bpk + k for b in block_ids for k in range(bpk)]",
            "block_ids = [b * bpk + k + 1 for b in block_ids for k in range(bpk)]",
        ),
    )


def kernel_slots_by_the_block_size(init_block_table_layout_tensors):
    """vLLM's ``BlockTables`` handing its slot-mapping kernel the scheduler's block sizes over a table of kernel
    blocks (the class of vllm-ascend #7019 in the V1 drafter): every slot of a hybrid target's draft is another
    block's."""
    return edited(
        init_block_table_layout_tensors,
        ("self.kernel_block_sizes, dtype=torch.int32", "self.block_sizes, dtype=torch.int32"),
    )


def sfa_keys_one_short(build):
    """Main's ``AscendSFAMetadataBuilder._build`` handing the sparse kernels each request's key length less one
    (``actual_seq_lengths_key``): every step of an SFA draft attends without its newest key. In a full graph the
    lengths are what the step's build wrote in the graph, at each replay."""
    return edited(
        build,
        (
            "runtime_seq_lens = common_attn_metadata.seq_lens[:num_reqs]",
            "runtime_seq_lens = common_attn_metadata.seq_lens[:num_reqs] - 1",
        ),
    )


def draft_rope_of_the_step_before(factory):
    """Main's ``build_draft_attn_metadata_factory`` forwarding each draft step's rotary positions one back: an MLA
    draft's builder gathers the cos/sin of the position before, and the step rotates by it."""

    @contextlib.contextmanager
    def broken(positions, pad, is_prefilling):
        with factory(positions - 1, pad, is_prefilling):
            yield

    return broken


def graph_steps_share_the_first_steps_lengths(build_draft_attn_metadatas):
    """main's ``build_draft_attn_metadatas`` (what ``run_fullgraph`` updates the decode graph's attention tasks
    with) handing every draft step the first step's host lengths, as builders sharing one buffer across steps
    did (vllm-ascend #14236): from step 3 on, a step attends with the keys of the step before."""

    @functools.wraps(build_draft_attn_metadatas)
    def broken(self, num_reqs_padded, is_draft_model_prefill):
        per_step = build_draft_attn_metadatas(self, num_reqs_padded, is_draft_model_prefill)
        if not is_draft_model_prefill:
            for metadata in per_step:
                self._update_decode_attn_metadata(metadata, 1, self.input_batch.num_reqs)
        return per_step

    return broken
