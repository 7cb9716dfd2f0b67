"""The design differences of vLLM's Model Runner V2 speculator loop, shared by every speculator built
on it (vLLM 0.33's ``MTPSpeculator``, vllm-ascend's MRV2 speculators): MRV2 chose otherwise, or takes
a fact from its runner in another form, and is self-consistent. Each adapter's table takes them as
they are, or with where its own upstream differs (docs/DIVERGENCES-vllm-mrv2.md explains each).
"""

from __future__ import annotations

from sim.impls import Skip
from sim.impls.divergence import Divergence, Kind, table
from sim.impls.features import Feature

LOOP = table(
    Divergence(
        "overflow-clamp",
        "_prepare_decode_inputs_kernel, _update_draft_inputs_kernel",
        "every step whose position base + j - 1 reaches max_model_len gets position 0, seq_len 1, slot -1",
        "position min(p + 1, max_model_len - 1), seq_len min(s + 1, max_model_len), and the slot of that clamped position: every overflowing (garbage) draft writes KV into the request's slot of position max_model_len - 1, over the KV the step before wrote there",
        "test_steps.py::test_overflow_clamp_divergence",
        kind=Kind.DESIGN,
        rule={"overflow_position": "clamp", "overflow_seq_len": "clamp"},
    ),
    Divergence(
        "stale-rejected-rows",
        "_prepare_prefill_inputs_kernel",
        "every first-pass row gets the next row's id and its own target position",
        "only rows up to each request's sample row are written; its rejected rows keep the buffer's old ids and positions (their outputs are never sampled, their KV lies past every later seq_len)",
        "test_prepare.py::test_stale_rejected_rows_divergence",
        kind=Kind.DESIGN,
        rule={"stale_rejected_rows": True},
    ),
    Divergence(
        "no-unpadded-path",
        "TargetDependentARSpeculator.propose",
        "unpadded mode (vLLM V1's disable_padded_drafter_batch) drops rejected tokens before the first pass",
        "one path, padded: the runner's counts of sampled tokens are all it is given, lists or rows alike",
        "test_prepare.py::test_unpadded_runs_the_padded_path",
        kind=Kind.DESIGN,
    ),
    Divergence(
        "unfiltered-last-sampled",
        "_post_update_kernel",
        "step 1 takes the last sampled id in [0, vocab); -1 and ids past the vocabulary are placeholders",
        "the rejection sampler's num_sampled says how many ids are real, and the last of them is taken as is: no placeholder or vocabulary filter (the adapter derives num_sampled from the placeholders)",
        "test_step_one.py::test_last_sampled_is_taken_unfiltered",
        kind=Kind.DESIGN,
    ),
    Divergence(
        "unsampled-row-rejected",
        "_get_num_sampled_and_rejected_kernel",
        "a request that verified no drafts rejects nothing, whatever it sampled (n_rej = 0 when k = 0)",
        "num_rejected = logits - num_sampled: a request that is no chunked prefill and sampled nothing rejects its last row, so the first pass samples the row before it (MRV2's sampler always samples)",
        "test_step_one.py::test_a_request_that_sampled_nothing_rejects_its_last_row",
        kind=Kind.DESIGN,
    ),
)

# What a speculator on the loop lacks: its one path is the padded one.
NO_UNPADDED = {
    Feature.UNPADDED: Skip(
        "MRV2 has no unpadded path (divergence no-unpadded-path): unpadded input runs the padded path"
    )
}
