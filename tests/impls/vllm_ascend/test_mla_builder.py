"""vllm-ascend's MLA metadata builder (``mla_v1.AscendMLAMetadataBuilder``) on draft steps, built as
``_propose`` builds them: every step's metadata before the first forward.

The gate drives the MLA builder in whole serving runs of an MLA draft (``Scenario.draft_attn='mla'``,
``sim.impls.kit.ascend.mla``); here it runs on its own, the checkout's code on the common metadata of
two consecutive draft steps, with vllm-ascend's rotary caches holding the tiny model's RoPE (cos and
sin of ``position * 50 ** (-i / 8)``). What the decode attention of a step is handed must still be its
own at its forward: it is not (``mla-draft-cos-sin-shared``).
"""

from __future__ import annotations

import pytest
import torch

from sim.impls.kit.ascend import mla
from sim.impls.kit.ascend.host_memory import unpinned_host_memory
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.metadata_checks import Built, MetadataMismatch, check_unchanged
from sim.impls.vllm_ascend.build import configured

PROBE = "mtp.mla_attn"  # an MLA draft layer, as the builder finds it in the static forward context
FREQS = 50.0 ** (-torch.arange(8) / 8)  # qk_rope_head_dim 8 in the tiny config


class _PrefillBackend:
    """What an MLA layer carries for its prefill kernels (a builder clones it; no draft step uses it)."""

    def clone(self):
        return self


class _MlaLayer:
    prefill_backend = _PrefillBackend()


@pytest.fixture
def mla_builder():
    p = configured(2, 4, 64, 32)
    context = p.vllm_config.compilation_config.static_forward_context
    context[PROBE] = _MlaLayer()
    rotary = import_ascend("vllm_ascend.ops.rotary_embedding")
    saved = {
        name: getattr(rotary, name) for name in ("_cos_cache", "_sin_cache", "_cos_mla", "_sin_mla", "_cos", "_sin")
    }
    for name in ("_cos_mla", "_sin_mla", "_cos", "_sin"):
        setattr(rotary, name, None)
    rotary.set_cos_and_sin(p.vllm_config, 16, 3, torch.float32, p.device)
    angles = torch.arange(64).float()[:, None] * FREQS
    rotary._cos_cache, rotary._sin_cache = angles.cos(), angles.sin()
    spec = p.draft_attn_groups[0].kv_cache_spec
    yield import_ascend("vllm_ascend.attention.mla_v1").AscendMLAMetadataBuilder(spec, [PROBE], p.vllm_config, p.device)
    for name, value in saved.items():
        setattr(rotary, name, value)
    del context[PROBE]


def _step(positions: list[int]):
    """A draft step's common metadata: one token per request at ``positions``."""
    utils = import_ascend("vllm_ascend.attention.utils")
    n = len(positions)
    seq = torch.tensor(positions, dtype=torch.int32) + 1
    qsl = torch.arange(n + 1, dtype=torch.int32)
    return utils.AscendCommonAttentionMetadata(
        query_start_loc=qsl, query_start_loc_cpu=qsl.clone(), seq_lens=seq, seq_lens_cpu=seq.clone(),
        num_reqs=n, num_actual_tokens=n, max_query_len=1, max_seq_len=0,
        block_table_tensor=torch.arange(4 * n, dtype=torch.int32).view(n, 4), slot_mapping=torch.arange(n),
        positions=torch.tensor(positions), num_computed_tokens_cpu=seq - 1,
    )  # fmt: skip


def test_draft_steps_share_the_mla_cos_sin_buffer(mla_builder):
    """Step 2's decode cos/sin, right at its build, are the next build's by its forward: both steps'
    are views of the one global ``_cos_mla`` / ``_sin_mla`` buffer (``use_cache=True``), which the
    SFA builder stopped using for drafts in #10878 (``use_cache=(draft_index is None)``)."""
    with unpinned_host_memory():
        two = mla_builder.build_for_drafting(_step([5, 9]), 1)
        assert torch.equal(two.decode.cos.flatten(1), torch.cos(torch.tensor([5.0, 9.0])[:, None] * FREQS))
        built = Built(2, {"decode.cos": two.decode.cos, "decode.sin": two.decode.sin})
        three = mla_builder.build_for_drafting(_step([6, 10]), 2)
    assert two.decode.cos.data_ptr() == three.decode.cos.data_ptr()
    with pytest.raises(MetadataMismatch, match=r"step 2: decode.cos changed between build and forward"):
        check_unchanged(built, 2)
    assert torch.equal(two.decode.cos.flatten(1), torch.cos(torch.tensor([6.0, 10.0])[:, None] * FREQS))


def test_the_rest_of_a_steps_mla_metadata_is_its_own(mla_builder):
    """The lengths, query offsets and table of step 2's decode metadata are still its own after step 3's build."""
    with unpinned_host_memory():
        two = mla_builder.build_for_drafting(_step([5, 9]), 1)
        held = {"seq_lens_list": two.decode.seq_lens_list, "actual_seq_lengths_q": two.decode.actual_seq_lengths_q}
        built = Built(2, {**held, "block_table": two.decode.block_table})
        mla_builder.build_for_drafting(_step([6, 10]), 2)
    check_unchanged(built, 2)
    assert (two.decode.seq_lens_list, two.decode.actual_seq_lengths_q) == ([6, 10], [1, 2])


def test_rope_positions_reads_each_rows_position_as_a_whole_table_comparison_does():
    """``mla.rope_positions`` (a search of the table's row keys) names the positions a comparison of each
    row with every row of the 64k-position table names: rows of the table anywhere in it, ``-0.0`` for
    ``0.0``, and -1 for a row one bit off, one of another position's cos with its own sin, or zeros."""
    cos_t, sin_t = mla.rotary_tables(8)
    keys, _ = mla._rope_index(8)
    assert keys.unique().numel() == keys.numel()  # every row its own key: the search finds the one row
    picked = torch.tensor([0, 1, 2, 255, 256, 4097, 32767, 65535])
    cos, sin = cos_t[picked].clone(), sin_t[picked].clone()
    sin[0] = -sin[0]  # sin of position 0 is 0.0 throughout: as -0.0, == still has it the table's row
    cos[2, 3] = torch.nextafter(cos[2, 3], torch.tensor(2.0))  # one bit off: no position's
    cos[4] = cos_t[9]  # another position's cos with its own sin
    cos[5], sin[5] = 0.0, 0.0
    rows = [(cos, sin), (cos[:, None, :], sin[:, None, :])]  # [N, half] and [N, 1, half]
    for c, s in rows:
        compared = (c.reshape(-1, 8)[:, None] == cos_t[None]).all(-1) & (s.reshape(-1, 8)[:, None] == sin_t[None]).all(
            -1
        )
        want = torch.where(compared.any(1), compared.to(torch.int8).argmax(1), -1)
        assert mla.rope_positions(c, s).tolist() == want.tolist() == [0, 1, -1, 255, -1, -1, 32767, 65535]
