"""Which slots a call's steps clobber when an implementation writes KV off the block table
(``sim.oracle.compare.misplaced_writes``), on a hand-worked call.

Plus-one slots (``Rules.slots_from_block_table`` False), K 2, block size 4, unpadded, every draft
rejected. Request 0's last accepted position 11 is block 61's last slot (247); its step 2 writes
247 + 1 = 248, block 62's first slot, where the table puts position 12 in block 16. Block 62 is
request 1's: its position 36, which its step 2 reads. The case is the one the gate found on
vllm-ascend 0.13.0 (docs/DIVERGENCES-vllm-ascend-0.13.md, ``slot-plus-one``).
"""

from __future__ import annotations

import pytest

from mtp.config import ProposerConfig
from sim.oracle.cases import BatchCase, RequestCase
from sim.oracle.compare import first_pass_slots, misplaced_writes
from sim.oracle.rules import CORE, Rules

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's

CFG = ProposerConfig(
    num_spec_tokens=2, vocab_size=32, block_size=4, max_model_len=63, max_num_tokens=64, max_num_reqs=4
)
PLUS_ONE = Rules(slots_from_block_table=False)


def _decode(num_computed: int, blocks: list[int]) -> RequestCase:
    """Query: one token plus 2 drafts, both rejected (one valid sample)."""
    return RequestCase([1, 2, 3, 4], num_computed, 3, 2, [5, -1, -1], False, blocks)


R0 = _decode(11, [5, 64, 61, 16])  # step 2 at position 12: slot 248 (table: block 16, slot 64)
R1 = _decode(36, [58, 39, 35, 71, 45, 8, 47, 30, 72, 62])  # position 36 in block 62: slot 248
CASE = BatchCase(CFG, [R0, R1], seed=0)


def test_a_step_writing_off_its_table_clobbers_that_slot():
    """Request 0's step 2 writes 248 (its table: 64); request 1's step 2 writes its own table slot."""
    assert misplaced_writes(CASE, False, PLUS_ONE) == {248}


def test_slots_from_the_table_clobber_nothing():
    assert misplaced_writes(CASE, False, CORE) == set()
    assert misplaced_writes(CASE, True, Rules(padded_seq_lens_lowered=False)) == set()


def test_a_restarted_position_clobbers_its_own_prefix():
    """vLLM's overflow restart, K 4: accepted length 62 of max_model_len 63, step 2 at position 62, step 3
    overflows (slot -1), step 4 restarts at position 1 with its real slot: 100 * 4 + 1, a prefix slot."""
    cfg = ProposerConfig(
        num_spec_tokens=4, vocab_size=32, block_size=4, max_model_len=63, max_num_tokens=64, max_num_reqs=4
    )
    req = RequestCase([1, 2], 61, 1, 0, [5, -1, -1, -1, -1], False, list(range(100, 116)))
    case = BatchCase(cfg, [req], seed=0)
    assert misplaced_writes(case, False, Rules(overflow_position="restart", overflow_seq_len="with-position")) == {401}
    assert misplaced_writes(case, False, CORE) == set()


def test_the_first_pass_rewrites_its_kept_rows():
    """Unpadded: one kept row each (positions 11 and 36); padded: all three rows each."""
    assert first_pass_slots(CASE, False, CORE) == {247, 248}
    assert first_pass_slots(CASE, True, CORE) == {247, 64, 65, 248, 249, 250}
