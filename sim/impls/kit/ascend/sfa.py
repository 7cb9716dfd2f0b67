"""The SFA family: vllm-ascend's ``AscendSFAMetadataBuilder`` builds the draft's metadata, and the tiny
attention reads what the sparse-flash-attention kernels read of it.

A DeepSeek V3.2 / GLM-5 MTP layer is SFA attention (MLA with a sparse indexer). Its backend's builder
(``sfa_v1.AscendSFAMetadataBuilder``, the checkout's, recording: ``builders.sfa_builder``) hands the
kernels device tensors, not host lists: ``cum_query_lens`` (each request's cumulative query length,
``actual_seq_lengths_query``), ``seq_lens`` (``actual_seq_lengths_key``), ``block_table`` and
``slot_mapping``, views of the common metadata's tensors, and per row the ``cos`` / ``sin`` it is rotated
with (``get_cos_and_sin_mla``: the global buffer for a first pass, a fresh gather for a draft step).
``read_back`` assembles exactly those into the core's ``AttentionMeta``, the rotation read back as
positions from the rows by exact lookup in the tiny model's rotary tables (``mla.install_rotary``,
``mla.rope_positions``). The kernels take no host bound: the bound is the largest length, on the
device. In a captured draft graph the kernels read the tensors the capture was handed, at each replay
(the SFA backend's ``update_graph_params`` updates nothing), so the captured forward reads them too.

Without DSA-CP (one rank here) the builder's per-draft-step ``spec_actual_seq_lengths_*`` buffers are
not used; ``c8_enable_reshape_optim`` is off (its ``store_kv_block_metadata`` is an NPU kernel).
"""

from __future__ import annotations

import torch

from sim.impls.kit.ascend import mla
from sim.impls.kit.metadata_checks import COMPUTED, RecordedMeta

HELD = ("slot_mapping", "block_table", "seq_lens", "cum_query_lens")


def is_sfa(meta) -> bool:
    """Whether ``meta`` is SFA metadata (its kernels' cumulative query lengths on the device)."""
    return hasattr(meta, "cum_query_lens") and hasattr(meta, "sin")


def _lengths(meta) -> tuple[torch.Tensor, torch.Tensor]:
    """(seq_lens [B], query_start_loc [B+1]) as the kernels read them: the device tensors, no host read."""
    cum = meta.cum_query_lens.to(torch.int32)
    return meta.seq_lens.to(torch.int32), torch.cat([cum.new_zeros(1), cum])


def kernel_tensors(meta, rows: int):
    """(seq_lens, query_start_loc, block_table, seq_len_bound) as the SFA kernels of a captured forward of
    ``rows`` rows read them, on the device (a replay reads them again): rows past the last query offset
    (graph padding the builder's requests do not cover) form one more request of no keys and no
    blocks, which sees nothing, as a kernel handed those lengths leaves such rows alone."""
    lens, qsl = _lengths(meta)
    n, table = lens.shape[0], meta.block_table
    if n > rows:
        raise ValueError(f"SFA metadata of {n} requests in a forward of {rows} rows")
    pad = rows + 1 - n
    lens = torch.cat([lens, lens.new_zeros(pad)])
    qsl = torch.cat([qsl, qsl.new_full((pad,), rows)])
    table = torch.cat([table, table.new_full((pad, table.shape[1]), -1)])
    return lens, qsl, table, lens.amax().reshape(1).to(torch.int64)


def read_back(meta) -> RecordedMeta:
    """What the SFA kernels read of a real ``AscendSFAMetadata`` now: per request, its query rows
    (``cum_query_lens``) and keys (``seq_lens``), the table, the slots, the positions each row is
    rotated at."""
    lens, qsl = _lengths(meta)
    built = getattr(meta, "recorded", None)  # a recording builder's record (none: MRV2's, edited in place)
    return RecordedMeta(
        query_start_loc=qsl,
        seq_lens=lens,
        block_table=meta.block_table,
        slot_mapping=meta.slot_mapping,
        seq_len_bound=lens.amax().reshape(1).to(torch.int64) if lens.numel() else lens.new_zeros(1, dtype=torch.int64),
        built=built,
        num_computed_tokens=built.views.get(COMPUTED) if built is not None else None,
        own_rows_only=False,  # the sparse kernels read the cached context whatever the attention state
        rope_positions=mla.rope_positions(meta.cos, meta.sin),
    )


def held(meta) -> dict:
    """What an ``AscendSFAMetadata``'s kernels keep views of until the forward (checked unchanged then).
    Not its cos and sin: the rotation is compared as positions with the reference's."""
    return {f"metadata.{name}": getattr(meta, name) for name in HELD}
