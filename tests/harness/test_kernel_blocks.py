"""A hybrid target's kernel blocks (``Scenario.kernel_block_size``): what a scenario takes, and how the
recording attention reads a runner's table of kernel blocks back as the blocks it reads
(``sim.impls.kit.ascend.kernel_blocks.fold``)."""

from __future__ import annotations

import json

import pytest
import torch

from sim.impls.kit.ascend import kernel_blocks
from sim.impls.kit.metadata_checks import MetadataMismatch
from sim.serving.scenario import Scenario

pytestmark = pytest.mark.order(-3)  # the harness's own tests, after the gate's


@pytest.mark.parametrize(
    ("fields", "said"),
    [
        ({"block_size": 8, "kernel_block_size": 3}, r"kernel_block_size=3: expected 0 or a divisor of block_size=8"),
        ({"block_size": 8, "kernel_block_size": 8}, r"kernel_block_size=8: expected 0 or a divisor of block_size=8"),
        ({"block_size": 8, "kernel_block_size": -2}, r"kernel_block_size=-2: expected 0 or a divisor"),
        (
            {"block_size": 8, "kernel_block_size": 2, "draft_attn": "mla"},
            r"kernel_block_size=2 with draft_attn='mla', .*: a hybrid target's MTP layer is one GQA attention layer",
        ),
    ],
)
def test_a_kernel_block_size_a_run_cannot_have_is_refused_by_name(fields, said):
    with pytest.raises(ValueError, match=said):
        Scenario(**fields)


def test_a_replay_file_without_kernel_blocks_loads_as_whole_blocks():
    saved = json.loads(Scenario(block_size=8, kernel_block_size=4).to_json())
    assert Scenario.from_dict(saved).kernel_block_size == 4
    del saved["kernel_block_size"]
    assert Scenario.from_dict(saved).kernel_block_size == 0


@pytest.fixture
def split_in_two(monkeypatch):
    """A call under ``split``: blocks of 8 tokens, kernel blocks of 4."""
    monkeypatch.setattr(kernel_blocks, "_split", [2, 4, True])


def test_a_runners_table_of_kernel_blocks_folds_to_the_blocks_it_reads(split_in_two):
    # request 0: blocks 3, 1 (kernel blocks 6, 7, 2, 3) with 13 tokens; request 1: block 5 with 4 tokens
    table = torch.tensor([[6, 7, 2, 3], [10, 11, -1, -1]], dtype=torch.int32)
    assert kernel_blocks.fold(table, [13, 4]).tolist() == [[3, 1], [5, -1]]


@pytest.mark.parametrize(
    ("table", "said"),
    [
        (
            [[6, 7, 4, 3]],
            r"request 0: kernel block column 3 holds 3, not kernel block 5 of its block.s .*: positions 12..15",
        ),
        ([[6, 9, 2, 3]], r"request 0: kernel block column 1 holds 9, not kernel block 7 of its block's"),
        ([[7, 8, 2, 3]], r"request 0: kernel block column 0 holds 7, not kernel block 6"),
    ],
)
def test_a_kernel_block_read_from_another_block_fails_naming_request_and_column(split_in_two, table, said):
    with pytest.raises(MetadataMismatch, match=said):
        kernel_blocks.fold(torch.tensor(table, dtype=torch.int32), [13])


def test_columns_past_a_requests_tokens_are_not_read(split_in_two):
    """A kernel column no position below the request's length reads (here past 5 tokens: columns 2 and 3)
    may hold anything: the padding of a table row."""
    table = torch.tensor([[6, 7, 0, 0]], dtype=torch.int32)
    assert kernel_blocks.fold(table, [5]).tolist() == [[3, 0]]


def test_outside_a_split_the_table_is_the_blocks():
    table = torch.tensor([[6, 7, 0, 0]], dtype=torch.int32)
    assert kernel_blocks.fold(table, [5]) is table


def test_a_column_of_the_rows_padding_is_no_kernel_block_read_from_another(split_in_two):
    """Lengths past a request's blocks (a known defect's bound, say) reach the row's padding, -1 for the whole
    block: that is the lengths' fault, compared apart, not a kernel block of another block."""
    table = torch.tensor([[6, 7, -1, -1]], dtype=torch.int32)
    assert kernel_blocks.fold(table, [13]).tolist() == [[3, -1]]
    with pytest.raises(MetadataMismatch, match="column 3 holds -1"):
        kernel_blocks.fold(torch.tensor([[6, 7, 2, -1]], dtype=torch.int32), [13])
