"""The Ascend MLA attention metadata that vllm-ascend 0.13.0's ``MtpProposer._propose`` edits in place.

``_propose`` builds the first pass's metadata with ``runner.attn_groups[0][0].get_metadata_builder()
.build(0, cad, model)`` and, for every later step, edits that object: ``query_start_loc``,
``slot_mapping`` (filled with -1, then one slot per request), ``seq_lens``, and on its ``decode``
part ``seq_lens``/``seq_lens_list``/``cos``/``sin``/``actual_seq_lengths_q``/``input_positions``/
``max_seq_lens`` (``prefill`` likewise). The real builder (``AscendMLAMetadataBuilder``) allocates
NPU workspaces and pinned buffers; ``MlaMetadataBuilder`` fills the same dataclasses
(``vllm_ascend.attention.mla_v1.AscendMLAMetadata`` and its decode/prefill parts) field by field
as 0.13.0's ``build`` / ``build_prefill_metadata`` / ``build_decode_metadata`` do on an eager
single rank (``graph_pad_size`` -1, no context parallel). Left out: attention masks and the
chunked-context plan of prefills with context (how an NPU kernel reads the context in chunks,
not which keys it reads). ``attention_view`` reads one back the way the MLA kernels do.
"""

from __future__ import annotations

import torch

from mtp.model import AttentionMeta
from sim.impls.vllm_ascend_0_13.importing import import_ascend


class MlaMetadataBuilder:
    """``runner.attn_groups[0][0]`` and its metadata builder in one (``get_metadata_builder`` returns self)."""

    def __init__(self, decode_threshold: int = 2):
        self.decode_threshold = decode_threshold  # 1 + K, as AscendMLAMetadataBuilder sets it

    def get_metadata_builder(self):
        return self

    def build(self, common_prefix_len: int, common_attn_metadata, model=None):
        """``AscendMLAMetadataBuilder.build`` (mla_v1.py, 0.13.0), eager, one rank."""
        mla = import_ascend("vllm_ascend.attention.mla_v1")
        utils = import_ascend("vllm_ascend.attention.utils")
        rope = import_ascend("vllm_ascend.ops.rotary_embedding")
        cad = common_attn_metadata
        num_reqs, n = cad.num_reqs, cad.num_actual_tokens
        nd, npf, ndt, _ = utils.split_decodes_and_prefills(cad, decode_threshold=self.decode_threshold)
        slot_mapping = cad.slot_mapping[:n]
        qsl_cpu = cad.query_start_loc_cpu
        query_lens = (qsl_cpu[1:] - qsl_cpu[:-1])[:num_reqs]
        seq_lens = cad.seq_lens_cpu[:num_reqs]  # the host copy: the builder never reads cad.seq_lens
        block_table = cad.block_table_tensor[:num_reqs]
        positions = cad.positions[:n].long()
        prefill = decode = None
        if npf > 0:  # build_prefill_metadata
            pos = positions[ndt:]
            cos, sin = rope.get_cos_and_sin_mla(pos)
            prefill = mla.AscendMLAPrefillMetadata(
                attn_mask=None,
                query_lens=query_lens[nd:].to(torch.int32),
                seq_lens=seq_lens,
                context_lens=seq_lens[nd:],
                input_positions=pos,
                query_start_loc=cad.query_start_loc[nd:] - cad.query_start_loc[nd],
                block_table=block_table[nd:],
                max_query_len=int(query_lens[nd:].max()),
                max_seq_lens=int(seq_lens[nd:].max()),
                chunked_context=None,
                sin=sin,
                cos=cos,
            )
        if nd > 0:  # build_decode_metadata: it narrows the builder's seq_lens and block table to the decodes
            seq_lens, block_table = seq_lens[:nd], block_table[:nd]
            pos = positions[:ndt]
            cos, sin = rope.get_cos_and_sin_mla(pos)
            decode = mla.AscendMLADecodeMetadata(
                input_positions=pos,
                block_table=block_table,
                seq_lens=seq_lens,
                seq_lens_list=seq_lens.tolist(),
                max_seq_lens=int(seq_lens.max()),
                actual_seq_lengths_q=qsl_cpu[1 : nd + 1].tolist(),
                attn_mask=None,
                sin=sin[:ndt],
                cos=cos[:ndt],
            )
        return mla.AscendMLAMetadata(
            num_actual_tokens_pcp_padded=n,
            num_input_tokens=cad.num_input_tokens,
            num_actual_tokens=n,
            query_lens=query_lens.tolist(),
            slot_mapping=slot_mapping,
            num_decodes=nd,
            num_decode_tokens=ndt,
            num_prefills=npf,
            attn_state=cad.attn_state,
            prefill=prefill,
            decode=decode,
            query_start_loc=cad.query_start_loc,
            block_tables=block_table,
            seq_lens=seq_lens,
        )


def attention_view(md) -> tuple[AttentionMeta, int]:
    """(what attention reads, its host seq_len bound) of an ``AscendMLAMetadata``: decode requests
    from ``decode.seq_lens_list`` and ``decode.block_table`` (the lengths the fused decode kernel is
    given), prefill requests from ``prefill.context_lens`` and ``prefill.block_table``; KV slots
    from ``slot_mapping``. Decode requests come first, as the runner orders an MLA batch."""
    seqs, tables, bound = [], [], 0
    if md.decode is not None:
        lens = torch.tensor(md.decode.seq_lens_list, dtype=torch.int32)
        seqs.append(lens)
        tables.append(md.decode.block_table[: lens.shape[0]])
        bound = max(bound, int(md.decode.max_seq_lens))
    if md.prefill is not None:
        seqs.append(md.prefill.context_lens.to(torch.int32))
        tables.append(md.prefill.block_table)
        bound = max(bound, int(md.prefill.max_seq_lens))
    qsl = md.query_start_loc
    seq_lens, table = torch.cat(seqs), torch.cat(tables)
    if seq_lens.shape[0] != qsl.shape[0] - 1:
        raise ValueError(
            f"MLA metadata describes {seq_lens.shape[0]} requests (decode + prefill) but "
            f"query_start_loc has {qsl.shape[0] - 1}"
        )
    meta = AttentionMeta(
        query_start_loc=qsl.to(torch.int32),
        seq_lens=seq_lens,
        block_table=table.to(torch.int32),
        slot_mapping=md.slot_mapping.to(torch.int64),
        seq_len_bound=torch.tensor([bound], dtype=torch.int64),
    )
    return meta, bound


def rope_positions(part) -> list[int]:
    """The positions a decode or prefill part's ``cos`` table was taken at (``importing.rope_tables``)."""
    return part.cos.reshape(part.cos.shape[0], -1)[:, 0].to(torch.int64).tolist()
