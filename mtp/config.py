"""Static configuration of a proposer: sizes that fix its persistent buffers."""

from __future__ import annotations

from dataclasses import dataclass

METHODS = ("mtp", "eagle", "eagle3", "draft_model")
EAGLE3_AUX_LAYERS = 3  # auxiliary hidden states eagle3 takes from the target


@dataclass(frozen=True)
class ProposerConfig:
    """Sizes of one MTP proposer.

    num_spec_tokens: K, drafts per request per propose call.
    vocab_size:      valid token ids are ``0 <= id < vocab_size``.
    block_size:      tokens per KV-cache block.
    max_model_len:   draft positions at or past it are garbage (docs/DESIGN.md step 4).
    max_num_tokens:  capacity of the flattened token buffers.
    max_num_reqs:    capacity of the per-request buffers.
    hidden_size:     width of the hidden states handed between passes.
    uses_mrope:      positions are M-RoPE's [3, T] rows (temporal, height,
                     width) besides the [T] sequence positions that slots and
                     seq_lens come from (``mtp.mrope``); off by default.
    method:          ``"mtp"``; ``"eagle"`` (EAGLE-1: a draft head of its
                     own, drafting from the target's last hidden states as
                     MTP does); or ``"eagle3"``: the target hands its
                     auxiliary hidden states ([T, 3 * hidden_size]) and the
                     draft model's ``combine_hidden_states`` folds them to
                     ``hidden_size`` before the first pass, never later;
                     or ``"draft_model"``: a small language model of its own,
                     on token ids alone (no hidden state), whose first pass
                     runs the target's tokens unshifted plus one row per
                     request for the next token (``mtp.prepare.expand_by_next_token``).
    """

    num_spec_tokens: int
    vocab_size: int
    block_size: int
    max_model_len: int
    max_num_tokens: int
    max_num_reqs: int
    hidden_size: int = 32
    uses_mrope: bool = False
    method: str = "mtp"

    def __post_init__(self) -> None:
        for name in (
            "num_spec_tokens",
            "vocab_size",
            "block_size",
            "max_model_len",
            "max_num_tokens",
            "max_num_reqs",
            "hidden_size",
        ):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name}={value!r}: must be a positive int")
        if not isinstance(self.uses_mrope, bool):
            raise ValueError(f"uses_mrope={self.uses_mrope!r}: must be a bool")
        if self.method not in METHODS:
            raise ValueError(f"method={self.method!r}: expected one of {METHODS}")
        if self.method == "draft_model" and self.uses_mrope:
            raise ValueError(
                "uses_mrope=True: method 'draft_model' runs its own positions, not the target's M-RoPE rows"
            )

    @property
    def extra_rows_per_request(self) -> int:
        """Rows the first pass adds to each request's query: the next token's (draft_model), else none."""
        return 1 if self.method == "draft_model" else 0

    @property
    def target_hidden_size(self) -> int:
        """Width of the target's hidden states handed to the proposer (eagle3: three layers)."""
        return EAGLE3_AUX_LAYERS * self.hidden_size if self.method == "eagle3" else self.hidden_size
