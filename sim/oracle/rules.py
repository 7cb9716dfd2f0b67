"""What the reference expects, per implementation: DESIGN.md's rules, or an adapter's documented divergences.

An implementation under test may differ from DESIGN.md by design (vLLM's
overflow handling) or by a known defect (vllm-ascend 0.23 never lowering
padded seq_lens). Each difference is named once in the adapter's divergence
table and pinned by a test there; here it is modelled, so the gate's
properties still run on that implementation and catch everything else.
``CORE`` is DESIGN.md itself, what the project's own core must meet.
"""

from __future__ import annotations

from dataclasses import dataclass

OVERFLOW_RULES = ("mask", "restart", "seq-len-restart")


@dataclass(frozen=True)
class Rules:
    """How the reference computes what an implementation must produce.

    padded_seq_lens_lowered: padded mode lowers every later step's seq_len by
        the rejected count (False: vllm-ascend's ``padded-seq-lens-not-lowered``,
        the seed's defect: steps 2..K count the rejected tokens as context).
    overflow: a draft step whose position reaches ``max_model_len``:
        ``mask``: position 0, seq_len 1, no slot, every such step (DESIGN step 4);
        ``restart``: the first such step as ``mask``, later ones continue from
        position 0 (1, 2, ...) with real slots (vLLM's ``overflow-restart``);
        ``seq-len-restart``: position and slot as ``mask``, but seq_len advances
        on its own and restarts at 1 once past ``max_model_len`` (vllm-ascend).
    max_query_len_compacted: unpadded mode reports the compacted batch's longest
        query (False: the original lengths, an upper bound, the seed's defect).
    stale_last_row: the batch's last row keeps an old buffer value as its
        first-pass input id when it is no sample row (vLLM's ``stale-last-row``);
        that id is not compared.
    steps_run_first_pass_rows: steps 2..K run at the first pass's row count,
        the rows past the batch's requests inert (slot -1), rather than one row
        per request (vllm-ascend's ``mtp-steps-run-padded-rows``).
    """

    padded_seq_lens_lowered: bool = True
    overflow: str = "mask"
    max_query_len_compacted: bool = True
    stale_last_row: bool = False
    steps_run_first_pass_rows: bool = False

    def __post_init__(self) -> None:
        if self.overflow not in OVERFLOW_RULES:
            raise ValueError(f"overflow={self.overflow!r}: expected one of {OVERFLOW_RULES}")

    def drafts_defined(self, padded: bool, k: int) -> int:
        """How many of a request's K drafts a reference defines: all, or only draft 1 when later steps
        attend to KV the call never wrote (padded seq_lens not lowered)."""
        return 1 if padded and not self.padded_seq_lens_lowered else k

    def step_seq_base(self, seq_len: int, accepted: int, padded: bool) -> int:
        """The seq_len later steps advance from: the accepted prefix, or the whole verified length."""
        return seq_len if padded and not self.padded_seq_lens_lowered else accepted

    def step(self, last_pos: int, base_seq: int, j: int, max_model_len: int) -> tuple[int, int, bool]:
        """(position, seq_len, writes KV) of draft step ``j`` >= 2 from the last accepted
        position and the seq_len base (both from the first pass)."""
        if self.overflow == "restart":
            pos, seq, writes = last_pos, base_seq, True
            for _ in range(j - 1):
                pos, seq, writes = pos + 1, seq + 1, True
                if pos >= max_model_len:
                    pos, seq, writes = 0, 1, False
            return pos, seq, writes
        pos = last_pos + j - 1
        if self.overflow == "mask":
            return (0, 1, False) if pos >= max_model_len else (pos, base_seq + j - 1, True)
        seq = base_seq
        for _ in range(j - 1):
            seq = 1 if seq + 1 > max_model_len else seq + 1
        return (0, seq, False) if pos >= max_model_len else (pos, seq, True)


CORE = Rules()
