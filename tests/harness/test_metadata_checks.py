"""The recording attention groups' two checks (``sim.impls.kit.metadata_checks``), without upstream code.

Each check is shown passing on consistent metadata and failing, by step, field and values, on a
metadata object broken one way: a host mirror that is not its device tensor, a tensor written
in place after the build, a mirror set to something that is not a tensor. The same checks on vllm-ascend's own
code: ``tests/impls/vllm_ascend/test_gate_catches_metadata.py``.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from sim.impls.kit.metadata_checks import Built, MetadataMismatch, check_mirrors, check_unchanged

pytestmark = pytest.mark.order(-3)


def _metadata(**changes):
    """Two requests, query lengths 3 and 1, seq_lens 7 and 4, every mirror consistent; plus a padded row."""
    fields = dict(
        num_reqs=2,
        query_start_loc=torch.tensor([0, 3, 4, 4], dtype=torch.int32),
        query_start_loc_cpu=torch.tensor([0, 3, 4, 4], dtype=torch.int32),
        seq_lens=torch.tensor([7, 4, 0], dtype=torch.int32),
        seq_lens_cpu=torch.tensor([7, 4, 9], dtype=torch.int32),  # a padded row past num_reqs is not live
        _seq_lens_cpu=None,
    )
    return SimpleNamespace(**(fields | changes))


def test_consistent_mirrors_pass_at_every_step():
    check_mirrors(_metadata(), 1)
    check_mirrors(_metadata(), 2)


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        (
            {"seq_lens_cpu": torch.tensor([6, 4])},
            r"^step 2: host mirror seq_lens_cpu is not seq_lens over the 2 live rows: got \[6, 4\], want \[7, 4\]$",
        ),
        (
            {"_seq_lens_cpu": torch.tensor([7, 5])},
            r"^step 2: host mirror _seq_lens_cpu is not seq_lens .*got \[7, 5\], want \[7, 4\]$",
        ),
        (
            {"query_start_loc_cpu": torch.tensor([0, 1, 2])},
            r"^step 2: host mirror query_start_loc_cpu is not query_start_loc over the 3 live rows: "
            r"got \[0, 1, 2\], want \[0, 3, 4\]$",
        ),
    ],
    ids=["seq_lens_cpu", "_seq_lens_cpu", "query_start_loc_cpu"],
)
def test_a_stale_mirror_fails_by_step_field_and_values(changes, message):
    with pytest.raises(MetadataMismatch, match=message):
        check_mirrors(_metadata(**changes), 2)


def test_a_mirror_that_is_not_a_tensor_is_refused_by_name():
    with pytest.raises(TypeError, match="^seq_lens_cpu: a list, not a tensor$"):
        check_mirrors(_metadata(seq_lens_cpu=[7, 4]), 1)


def test_a_tensor_written_after_its_build_fails_at_the_forward():
    seq_lens = torch.tensor([7, 4])
    built = Built(3, {"seq_lens": seq_lens, "slot_mapping": torch.tensor([5, -1])})
    check_unchanged(built, 3)  # nothing written yet
    seq_lens[1] += 1  # the next step's update, into the tensor this step holds
    with pytest.raises(
        MetadataMismatch,
        match=r"^step 3: seq_lens changed between build and forward: at forward \[7, 5\], at build \[7, 4\]$",
    ):
        check_unchanged(built, 3)


def test_the_layers_of_one_kv_cache_group_attend_with_one_steps_metadata():
    """``check_same_step``: a second layer given the first's table, slots and lengths passes; given
    other lengths, it fails naming the step, both layers, the field and both values."""
    from mtp.model import AttentionMeta
    from sim.impls.kit.metadata_checks import check_same_step

    def meta(seq_lens):
        table = torch.tensor([[3, 4], [5, -1]], dtype=torch.int32)
        slots = torch.tensor([13, 21], dtype=torch.int64)
        return AttentionMeta(torch.tensor([0, 1, 2]), torch.tensor(seq_lens), table, slots, torch.tensor([9]))

    check_same_step(2, "b", meta([6, 2]), "a", meta([6, 2]))
    with pytest.raises(MetadataMismatch, match=r"step 2: layer b is given seq_lens \[7, 3\], layer a \[6, 2\]"):
        check_same_step(2, "b", meta([7, 3]), "a", meta([6, 2]))
