"""Broken vllm-ascends on data-parallel ranks, as a regression there would bring them: each takes the
original method and returns the broken one.

``draft_runs_its_own_size`` is a runner whose ``_sync_metadata_across_dp`` syncs with its peers but
hands the drafter its own token count back, so ranks pad their draft forwards to different sizes;
``dummy_run_skips_the_dp_sync`` is a drafter whose ``dummy_run`` does not sync with its peers (a rank
with no requests "has nothing to agree on"), so a busy rank's sync meets the idle rank's next
collective, the class of vllm-ascend #5777 (a dummy run padding and syncing in another order than a
real step); ``dummy_replays_a_graph_whatever_its_peers_run`` is a drafter whose dummy run dispatches
its uniform-decode batch to a graph by itself, not in the mode the ranks agreed, so an idle rank
replays a graph while a peer with a prefill drafts eagerly at the same size (the class of vllm-ascend
#5979 and #13827: graph and eager work meeting in one DP collective);
``sample_rows_unpadded_under_lmhead_tp`` is a drafter that takes lm-head TP for off (its own check of it
lost), so under vllm-ascend's lm-head TP across DP ranks each rank computes its draft logits at its own
row count, and the ranks' all-gather of the lm head meets rows of other sizes;
``lm_head_logits_of_the_peer_rows`` is a logits processor that, under that lm-head TP, hands each rank
the next rank's rows of the gathered logits (same shapes, every collective as before), so a rank samples
its drafts from its peer's states.

``balance_schedule_without_lookahead`` is a balance scheduler (``Scenario.scheduler = "balance"``) whose copy of
vLLM's schedule allocates no lookahead slots for its running requests either (its ``allocate_slots`` calls
without ``num_lookahead_tokens``, as a copy of an older vLLM would), so a decode's drafts write the draft
layer's KV past the request's blocks: the class of 0.23.0's known defect for a first scheduling, where a
deployment's DP ranks run balance scheduling.

``lm_head_logits_gathered_whole`` is the control of the last: lm-head TP written otherwise and right,
each rank all-gathering every rank's vocabulary slice of all the rows and keeping its own rows (no
all-to-all), which the gate must pass.
"""

from __future__ import annotations


def draft_runs_its_own_size(original):
    def broken(self, num_tokens, is_draft_model=False, *args, **kwargs):
        synced, across, mode = original(self, num_tokens, is_draft_model, *args, **kwargs)
        return (num_tokens if is_draft_model else synced), across, mode

    return broken


def dummy_run_skips_the_dp_sync(original):
    def broken(self, num_tokens, *args, **kwargs):
        runner = self.runner
        runner._sync_metadata_across_dp = lambda n, *_, **__: (n, None, None)  # shadows the runner's own
        try:
            return original(self, num_tokens, *args, **kwargs)
        finally:
            del runner._sync_metadata_across_dp

    return broken


def dummy_replays_a_graph_whatever_its_peers_run(original):
    def broken(self, *args, num_tokens, aclgraph_runtime_mode=None, batch_descriptor=None, **kwargs):
        mode, desc = self.runner.cudagraph_dispatcher.dispatch(num_tokens=num_tokens, uniform_decode=True)
        return original(self, *args, num_tokens=num_tokens, aclgraph_runtime_mode=mode, batch_descriptor=desc, **kwargs)

    return broken


def sample_rows_unpadded_under_lmhead_tp(original):
    return lambda: False


def _lm_head_logits(own_rows):
    """``_get_logits_lmheadtp`` (the checkout's, enable_reduce_sample off) with the vocabulary slices joined
    by an all-gather, of which a rank keeps the rows ``own_rows(rank, size)`` names."""

    def logits(self, hidden_states, lm_head, embedding_bias):
        from sim.impls.kit.ascend.importing import import_ascend

        group = import_ascend("vllm_ascend.distributed.parallel_state").get_lmhead_tp_group()
        gathered = group.all_gather(hidden_states, dim=0)
        sliced = lm_head.quant_method.apply(lm_head, gathered, bias=embedding_bias)
        whole = group.all_gather(sliced, dim=-1)  # every row, the ranks' vocabulary slices side by side
        rows = whole.chunk(group.world_size, dim=0)[own_rows(group.rank_in_group, group.world_size)]
        return rows[..., : self.org_vocab_size]

    return logits


def lm_head_logits_gathered_whole(original):
    return _lm_head_logits(lambda rank, size: rank)


def lm_head_logits_of_the_peer_rows(original):
    return _lm_head_logits(lambda rank, size: (rank + 1) % size)


def balance_schedule_without_lookahead(original):
    def broken(self, *args, **kwargs):
        kept, self.num_lookahead_tokens = self.num_lookahead_tokens, 0
        try:
            return original(self, *args, **kwargs)
        finally:
            self.num_lookahead_tokens = kept

    return broken
