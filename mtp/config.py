"""Static configuration of a proposer: sizes that fix its persistent buffers."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class ProposerConfig:
    """Sizes of one MTP proposer.

    num_spec_tokens: K, drafts per request per propose call.
    vocab_size:      valid token ids are ``0 <= id < vocab_size``.
    block_size:      tokens per KV-cache block.
    max_model_len:   draft positions at or past it are garbage (DESIGN step 4).
    max_num_tokens:  capacity of the flattened token buffers.
    max_num_reqs:    capacity of the per-request buffers.
    hidden_size:     width of the hidden states handed between passes.
    """

    num_spec_tokens: int
    vocab_size: int
    block_size: int
    max_model_len: int
    max_num_tokens: int
    max_num_reqs: int
    hidden_size: int = 32

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
