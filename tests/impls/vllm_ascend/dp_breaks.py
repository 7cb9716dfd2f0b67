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
row count, and the ranks' all-gather of the lm head meets rows of other sizes.
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
