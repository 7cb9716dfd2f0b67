"""The MLA family: vllm-ascend's ``AscendMLAMetadataBuilder`` builds the draft's metadata, and the tiny
attention reads what the MLA kernels read of it.

A DeepSeek MTP layer is MLA attention. Its backend's builder (``mla_v1.AscendMLAMetadataBuilder``, the
checkout's, recording: ``builders.mla_builder``) splits each forward's requests into decodes (at most
``num_speculative_tokens + 1`` query tokens, first in the batch) and prefills, and hands each part its
own host lists and table: ``decode.seq_lens_list`` / ``decode.actual_seq_lengths_q`` /
``decode.block_table``, ``prefill.actual_seq_lengths_q`` / ``prefill.block_table`` and, for a prefill
with tokens before its rows, the chunked context's ``chunk_seq_lens``; the slots for all rows.
``read_back`` assembles exactly those into the core's ``AttentionMeta``.

MLA applies RoPE inside the attention: the model's ``positions`` argument is not what rotates the
queries and keys, the metadata's ``decode.cos`` / ``decode.sin`` and ``prefill.cos`` / ``prefill.sin``
rows are (gathered by ``get_cos_and_sin_mla`` from vllm-ascend's rotary tables). ``install_rotary``
fills those tables with the tiny model's RoPE (``cos`` and ``sin`` of ``position * base ** (-i / half)``,
what ``sim.models.tiny.rope`` computes), so a row's cos and sin name exactly one position;
``read_back`` reads that position back from the rows (``rope_positions``, -1 for rows that are no
position's), the tiny model rotates by it, and each call's record carries it
(``StepRecord.rope_positions``), compared with the reference's. In a captured draft graph the decode
kernel is handed its lists as the MLA backend's ``update_graph_params`` hands them (``kernel_lists``)
and the rotation is read from the captured cos/sin at each replay.
A builder that hands a step another step's rotation (vllm-ascend's ``mla-draft-cos-sin-shared``: every
step's decode cos/sin is a view of one global buffer, and ``_propose`` builds every step before the
first forward) rotates by the other step's positions, and the record says which.

Stubbed, for plumbing only: the MLA layer's ``prefill_backend`` (vLLM's builder keeps it, or a clone;
vllm-ascend's never calls it), ``draft_layers.UnusedPrefillBackend``.
"""

from __future__ import annotations

import functools

import torch

from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.metadata_checks import COMPUTED, RecordedMeta
from sim.impls.kit.tiny_config import MAX_MODEL_LEN
from sim.models.tiny import TinyConfig, rope_angles


@functools.cache
def rotary_tables(half: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The tiny model's RoPE as vllm-ascend's rotary tables: cos and sin of every position below
    ``MAX_MODEL_LEN``, [positions, half], computed as ``sim.models.tiny.rope`` computes a row."""
    angles = rope_angles(torch.arange(MAX_MODEL_LEN), half, TinyConfig.rope_base)
    return angles.cos().to(device or "cpu"), angles.sin().to(device or "cpu")


def install_rotary(vllm_config, device: torch.device) -> None:
    """vllm-ascend's rotary caches as a DeepSeek model's rotary embedding leaves them, holding the tiny
    model's RoPE (``rotary_tables``): ``_cos_cache`` / ``_sin_cache`` (what ``get_cos_and_sin_mla``
    gathers from) and the ``_cos_mla`` / ``_sin_mla`` buffers of ``set_cos_and_sin`` (once)."""
    rotary = import_ascend("vllm_ascend.ops.rotary_embedding")
    half = vllm_config.model_config.hf_text_config.qk_rope_head_dim
    if rotary._cos_mla is None:
        scheduler = vllm_config.scheduler_config
        rotary.set_cos_and_sin(vllm_config, scheduler.max_num_seqs, 1, torch.float32, device)
    cos, sin = rotary_tables(half)
    rotary._record_cos_and_sin_cache(cos.to(device), sin.to(device))


def rope_positions(cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """The position whose RoPE each row's ``cos`` and ``sin`` are ([N, ..., half] each), int64 [N], -1
    for a row that is no position's (a builder handing rows it never gathered); on the rows' device,
    with no host read, so that a captured graph computes it at every replay.

    A row is looked up by a key of its values among the table's sorted keys (``_rope_index``), then
    compared whole with the table's row there: exact equality, as ``==`` has it, at the cost of a
    search instead of a comparison with each of the table's 64k rows."""
    n, half = cos.shape[0], cos.shape[-1]
    rows_cos, rows_sin = cos.reshape(n, half), sin.reshape(n, half)
    table_cos, table_sin = rotary_tables(half, cos.device)
    keys, order = _rope_index(half, cos.device)
    at = torch.searchsorted(keys, _row_keys(rows_cos, rows_sin)).clamp_(max=keys.numel() - 1)
    found = order[at]
    match = (rows_cos == table_cos[found]).all(-1) & (rows_sin == table_sin[found]).all(-1)
    return torch.where(match, found, -1)


_KEY_WEIGHTS = torch.randint(1, 2**24, (64,), generator=torch.Generator().manual_seed(0))


def _row_keys(cos: torch.Tensor, sin: torch.Tensor) -> torch.Tensor:
    """An int64 key of each row's values (their float32 bits, -0.0 as 0.0, weighted: below 2**62 for up
    to 64 values); rows equal as ``==`` has it have equal keys."""
    values = torch.cat([cos, sin], dim=-1).to(torch.float32) + 0.0  # -0.0 + 0.0 is 0.0
    bits = values.contiguous().view(torch.int32).to(torch.int64) & 0xFFFFFFFF
    return (bits * _KEY_WEIGHTS[: bits.shape[-1]].to(bits.device)).sum(-1)


@functools.cache
def _rope_index(half: int, device: torch.device | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """The rotary table's row keys sorted, and the position of each. Its rows' keys are distinct (a
    test checks the tables the harness builds), so the search finds the one row a key can be; were two
    equal, a row of the second would read -1 and fail its comparison, never pass one."""
    keys, order = _row_keys(*rotary_tables(half, device)).sort()
    return keys, order


def kernel_lists(meta) -> tuple[list[int], list[int], torch.Tensor]:
    """(``seq_lens_list``, ``actual_seq_lengths_q``, block table) the MLA decode kernel of a captured
    draft graph is handed, as the draft branch of vllm-ascend's ``AscendMLAImpl.update_graph_params``
    hands them: the decode part's, the lengths padded with 0 to the query offsets' count."""
    decode = meta.decode
    queries = [int(q) for q in decode.actual_seq_lengths_q]
    lens = [int(n) for n in decode.seq_lens_list]
    return lens + [0] * (len(queries) - len(lens)), queries, decode.block_table


def _query_offsets(cumulative: list[int], start: int) -> list[int]:
    return [start + int(q) for q in cumulative]


def _prefill_query_ends(prefill) -> list[int]:
    """Where each prefill request's query rows end, as the prefill kernel reads them: its host list
    ``actual_seq_lengths_q`` (v0.20.2rc on), or the cumulated ``query_lens`` (v0.18.0's ``npu_ring_mla``
    is handed those as its ``seqlen``)."""
    ends = getattr(prefill, "actual_seq_lengths_q", None)
    return [int(e) for e in ends] if ends is not None else prefill.query_lens.cumsum(0).tolist()


def read_back(meta) -> RecordedMeta:
    """What the MLA kernels read of a real ``AscendMLAMetadata`` now: per request, its query rows and the
    keys it attends to (decodes: ``seq_lens_list``; prefills: the chunked context's lengths plus their
    own rows), the decode and prefill tables, the slots, and the positions each row is rotated at."""
    decode, prefill = meta.decode, meta.prefill
    nd, ndt = int(meta.num_decodes), int(meta.num_decode_tokens)
    device = meta.slot_mapping.device
    qsl, lens, tables, cos, sin = [0], [], [], [], []
    if decode is not None:
        qsl += _query_offsets(decode.actual_seq_lengths_q[:nd], 0)
        lens += [int(n) for n in decode.seq_lens_list[:nd]]
        tables.append(decode.block_table[:nd])
        cos.append(decode.cos[:ndt])
        sin.append(decode.sin[:ndt])
    if prefill is not None:
        ends = _prefill_query_ends(prefill)
        queries = [b - a for a, b in zip([0, *ends], ends)]
        qsl += _query_offsets(ends, ndt)
        context = prefill.chunked_context
        before = context.chunk_seq_lens.sum(dim=0).tolist() if context is not None else [0] * len(queries)
        lens += [int(c) + q for c, q in zip(before, queries)]
        tables.append(prefill.block_table)
        cos.append(prefill.cos)
        sin.append(prefill.sin)
    built = getattr(meta, "recorded", None)  # a recording builder's record (none: MRV2's, edited in place)
    return RecordedMeta(
        query_start_loc=torch.tensor(qsl, dtype=torch.int32, device=device),
        seq_lens=torch.tensor(lens, dtype=torch.int32, device=device),
        block_table=torch.cat(tables),
        slot_mapping=meta.slot_mapping,
        seq_len_bound=torch.tensor([max(lens, default=0)], dtype=torch.int64),
        built=built,
        num_computed_tokens=built.views.get(COMPUTED) if built is not None else None,
        own_rows_only=False,  # MLA's kernels read the cached context whatever the attention state
        rope_positions=rope_positions(torch.cat(cos), torch.cat(sin)),
    )


def held(meta) -> dict:
    """What an ``AscendMLAMetadata``'s kernels keep views of until the forward (checked unchanged then):
    the slots, the tables and host lists of each part. Not its cos and sin: the defect that shares them
    across steps is modelled (``rope_positions`` are compared with the reference's)."""
    out = {"metadata.slot_mapping": meta.slot_mapping, "metadata.block_tables": meta.block_tables}
    if meta.decode is not None:
        for name in ("block_table", "seq_lens_list", "actual_seq_lengths_q"):
            out[f"metadata.decode.{name}"] = getattr(meta.decode, name)
    if meta.prefill is not None:
        for name in ("block_table", "actual_seq_lengths_q", "query_lens"):  # the last two: one generation each
            if hasattr(meta.prefill, name):
                out[f"metadata.prefill.{name}"] = getattr(meta.prefill, name)
    return out


def is_mla(meta) -> bool:
    """Whether ``meta`` is MLA metadata (decode and prefill parts) rather than ``AscendMetadata``."""
    return hasattr(meta, "decode") and hasattr(meta, "prefill")
