"""vllm-ascend 0.13.0's ``MtpProposer`` with a known defect fixed, as a pull request fixing it would.

``FIXES``: name -> (the known defect, the class's method and the fix of it). The step loop's fixes are
edits of ``_propose``'s own lines (``tests.impls.source_fix``); the rest of 0.13.0 runs as released.
``-p tests.impls.vllm_ascend_0_13.defect_fixes`` with ``MTP_FIXED_VLLM_ASCEND_0_13=NAME`` applies one for
the session (in every xdist worker), so the whole gate runs on it.

- ``slots-from-block-table``: ``slot-plus-one``: each step's slot looked up in the block table at its
  (clamped) position, as vLLM's EagleProposer computes it.
- ``seq-lens-lowered``: ``padded-seq-lens-not-lowered``: before step 2, the step metadata's seq_lens
  lowered by each request's rejected count (its last row less its sample row), so steps 2..K attend
  to the accepted prefix (the first pass keeps the unadjusted lengths).
- ``max-query-len-compacted``: ``unpadded-max-query-len``: ``prepare_inputs`` reports the compacted
  batch's longest query.
"""

from __future__ import annotations

import pytest

from tests.impls.fixes import edited, fix_method, max_query_len_compacted, session_plugin

ENV = "MTP_FIXED_VLLM_ASCEND_0_13"

SLOTS = (
    "            slot_mapping += 1\n",
    "            block_size = self.vllm_config.cache_config.block_size\n"
    "            blocks = common_attn_metadata.block_table_tensor[:batch_size].gather(\n"
    "                1, (clamped_positions // block_size).view(-1, 1).long()).view(-1)\n"
    "            slot_mapping.copy_(blocks * block_size + clamped_positions % block_size)\n",
)
LOWERED = (
    "                last_token_indices = self.arange[:batch_size]\n",
    "                rejected = common_attn_metadata.query_start_loc[1:batch_size + 1] - 1 - last_token_indices\n"
    "                attn_metadata_i.seq_lens = attn_metadata_i.seq_lens.clone()\n"
    "                attn_metadata_i.seq_lens[:batch_size] -= rejected.to(attn_metadata_i.seq_lens.dtype)\n"
    "                last_token_indices = self.arange[:batch_size]\n",
)


def _edit(*edits):
    return lambda method: edited(method, *edits)


FIXES = {
    "slots-from-block-table": ("slot-plus-one", "_propose", _edit(SLOTS)),
    "seq-lens-lowered": ("padded-seq-lens-not-lowered", "_propose", _edit(LOWERED)),
    "max-query-len-compacted": ("unpadded-max-query-len", "prepare_inputs", max_query_len_compacted),
}
# The known defects with a rule no fix variant is kept for, and why.
NO_FIX = {
    "overflow-position-restart": (
        "written (each step advancing the position it computed, seq_len 1 where it reaches max_model_len), it "
        "passes its serving runs but not the gate: with padded-seq-lens-not-lowered in force, the spec for the "
        "overflow rule alone has a valid position attend past max_model_len (seq_len 18, max_model_len 17), "
        "where no KV is defined and the implementation's attention and the reference's defect model differ "
        "(draft 2: got 0, want 30); the same corner as vllm-ascend's overflow-seq-len-restart"
    ),
    "prefill-batch-drafts-once": (
        "the early exit is not the defect alone: 0.13's step loop updates the MLA decode metadata only, so "
        "with the exit removed a batch with a prefill fails in the MLA metadata (2 requests described, 3 "
        "in query_start_loc) and its prefill request's later steps attend with the wrong seq_len (got 10, "
        "want 9); a fix is a prefill path of the step loop, more than an edit of its lines"
    ),
}


def apply(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """0.13.0's proposer with the fix ``name`` (``FIXES``)."""
    from sim.impls.vllm_ascend_0_13.build import mtp_proposer

    fix_method(FIXES, ENV, "vllm-ascend 0.13.0", name, mtp_proposer(8), monkeypatch)


pytest_configure = session_plugin(ENV, lambda name, monkeypatch: apply(name, monkeypatch))
