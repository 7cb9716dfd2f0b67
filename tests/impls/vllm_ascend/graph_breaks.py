"""vllm-ascend's full-graph path broken the way its fix history broke it, for ``test_graphs.py``
and the whole-gate runs of ``broken_gate`` (each ``breaking(original) -> broken``, for one method)."""

from __future__ import annotations

import functools

from sim.impls.kit.ascend.importing import import_ascend


def params_not_updated(original):
    """``_update_full_graph_params``: never called after a replay (the captured tasks keep the
    capture's host parameters; on an NPU the replay waits on their events forever)."""

    @functools.wraps(original)
    def broken(self, forward_context, num_tokens, draft_attn_metadatas=None):
        return None

    return broken


def params_of_the_first_step(original):
    """``_update_full_graph_params``: every step's task updated with step 1's metadata (the merged
    graph's steps confused: their lengths never advance)."""

    @functools.wraps(original)
    def broken(self, forward_context, num_tokens, draft_attn_metadatas=None):
        if draft_attn_metadatas:
            draft_attn_metadatas = [draft_attn_metadatas[0]] * len(draft_attn_metadatas)
        return original(self, forward_context, num_tokens, draft_attn_metadatas)

    return broken


def sizes_reversed(original):
    """``CudagraphDispatcher.dispatch`` (the runner's, which the drafter asks): a batch padded to the
    largest captured size that holds it instead of the smallest (the size list walked reversed)."""

    @functools.wraps(original)
    def broken(self, num_tokens, *args, **kwargs):
        mode, desc = original(self, num_tokens, *args, **kwargs)
        config = import_ascend("vllm.config")
        if mode != config.CUDAGraphMode.FULL:
            return mode, desc
        largest = max(self.cudagraph_keys[config.CUDAGraphMode.FULL], key=lambda d: d.num_tokens)
        return mode, largest

    return broken


def sample_rows_from_padded_query_start_loc(original):
    """``_run_merged_draft``: under a full graph, the sample rows taken from the graph-padded
    ``query_start_loc`` (each request's last row) instead of the ones handed in (its last accepted)."""

    @functools.wraps(original)
    def broken(self, num_input_tokens, batch_size, token_indices_to_sample, *args, **kwargs):
        forward_context = import_ascend("vllm.forward_context").get_forward_context()
        if forward_context.cudagraph_runtime_mode == import_ascend("vllm.config").CUDAGraphMode.FULL:
            n = token_indices_to_sample.shape[0]
            token_indices_to_sample.copy_(self.query_start_loc.gpu[1 : n + 1] - 1)
        return original(self, num_input_tokens, batch_size, token_indices_to_sample, *args, **kwargs)

    return broken
