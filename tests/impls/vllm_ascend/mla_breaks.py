"""Broken MLA metadata builders, for ``test_gate_catches_mla``: each wraps a method of the checkout's
``AscendMLAMetadataBuilder`` (``mla_v1``), so that an MLA draft's attention is handed something else than
what the MLA kernels must read:

- ``rope_of_the_next_position``: ``build_decode_metadata`` gathers its decode rows' cos and sin at their
  positions plus one (RoPE a position late: a wrong gather index, or a stale position buffer);
- ``decode_lengths_one_short``: ``build_decode_metadata`` hands the decode kernel host lengths one short
  (``seq_lens_list``), the last key of each decode unread;
- ``prefill_context_dropped``: ``build_chunked_metadata`` hands a prefill with tokens before its rows no
  chunked context, so its rows attend to themselves alone.
"""

from __future__ import annotations

import copy
import functools


def rope_of_the_next_position(build_decode_metadata):
    @functools.wraps(build_decode_metadata)
    def wrapper(self, common_prefix_len, common_attn_metadata, *args, **kwargs):
        cad = copy.copy(common_attn_metadata)
        cad.positions = common_attn_metadata.positions + 1
        return build_decode_metadata(self, common_prefix_len, cad, *args, **kwargs)

    return wrapper


def decode_lengths_one_short(build_decode_metadata):
    @functools.wraps(build_decode_metadata)
    def wrapper(self, *args, **kwargs):
        decode = build_decode_metadata(self, *args, **kwargs)
        decode.seq_lens_list = [max(n - 1, 0) for n in decode.seq_lens_list]
        return decode

    return wrapper


def prefill_context_dropped(build_chunked_metadata):
    @functools.wraps(build_chunked_metadata)
    def wrapper(self, *args, **kwargs):
        build_chunked_metadata(self, *args, **kwargs)
        return None

    return wrapper
