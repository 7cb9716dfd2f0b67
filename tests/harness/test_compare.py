"""Which drafts the reference defines when an implementation writes KV off the block table
(``sim.oracle.compare``), on a hand-worked call.

Plus-one slots (``Rules.slots_from_block_table`` False), K 2, block size 4, unpadded, every draft
rejected. Request 0's last accepted position 11 is block 61's last slot (247); its step 2 writes
247 + 1 = 248, block 62's first slot, where the table puts position 12 in block 16. Block 62 is
request 1's: its position 36, which its step 2 reads. The case is the one the gate found on
vllm-ascend 0.13.0 (docs/DIVERGENCES-vllm-ascend-0.13.md, ``slot-plus-one``).
"""

from __future__ import annotations

from mtp.config import ProposerConfig
from sim.oracle.cases import BatchCase, RequestCase
from sim.oracle.compare import drafts_over_intact_kv, kv_written_elsewhere
from sim.oracle.rules import CORE, Rules

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


def test_a_request_writing_off_its_table_defines_draft_one_only():
    assert drafts_over_intact_kv(CASE, 0, False, PLUS_ONE) == 1
    assert kv_written_elsewhere(CASE, False, PLUS_ONE)


def test_a_request_reading_a_slot_another_wrote_by_mistake_defines_draft_one_only():
    """Request 1's own slots are its table's, but its step 2 reads slot 248, which request 0 wrote."""
    alone = CASE._replace(requests=[R1])
    assert drafts_over_intact_kv(alone, 0, False, PLUS_ONE) == 2
    assert drafts_over_intact_kv(CASE, 1, False, PLUS_ONE) == 1


def test_a_misplaced_write_another_request_never_reads_leaves_its_drafts_defined():
    """Request 1 moved to blocks that do not hold slot 248: its drafts stay defined."""
    elsewhere = CASE._replace(requests=[R0, R1._replace(blocks=[58, 39, 35, 71, 45, 8, 47, 30, 72, 63])])
    assert drafts_over_intact_kv(elsewhere, 1, False, PLUS_ONE) == 2


def test_slots_from_the_table_define_every_draft():
    assert [drafts_over_intact_kv(CASE, r, False, CORE) for r in (0, 1)] == [2, 2]
    assert not kv_written_elsewhere(CASE, False, CORE)
