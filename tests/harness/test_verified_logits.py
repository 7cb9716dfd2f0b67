"""The target's logits a step's verification stands for (``verified_logits.verified_rows``), which a runner's
own sampling turns back into that verification under ``Scenario.runner_samples``: worked rows, and a
verification no rejection sampler gives refused by name; and the lm head that hands a runner those logits for the
hidden rows it samples (``TargetHead``)."""

from __future__ import annotations

import pytest
import torch

from mtp.config import ProposerConfig
from sim.impls.kit import verified_logits
from sim.oracle.cases import BatchCase, RequestCase, to_batch

CONFIG = ProposerConfig(3, 96, 4, 96, 64, 8)
# a decode that verified 3 drafts (11, 12, 13) and kept the first; a partial prefill, its sample discarded;
# a decode that kept all three and took the bonus 60
DECODE = RequestCase([10, 11, 12, 13, 50], 20, 4, 3, [11, 40, -1, -1], False, [0, 1, 2, 3, 4, 5, 6])
PARTIAL = RequestCase([7, 8, 9], 0, 2, 0, [33, -1, -1, -1], True, [7])
ALL_KEPT = RequestCase([20, 21, 22, 23, 60], 8, 4, 3, [21, 22, 23, 60], False, [8, 9, 10])


@pytest.mark.parametrize("padded", [True, False], ids=["padded", "unpadded"])
def test_each_row_chooses_what_the_verification_decided(padded):
    batch, sampled = to_batch(BatchCase(CONFIG, [DECODE, PARTIAL, ALL_KEPT], seed=0), torch.device("cpu"), padded)
    rows = verified_logits.verified_rows(batch, sampled, 96)
    # kept draft, the target's token at the first rejected, a later draft's own id, the bonus row past it
    assert rows[:4] == [11, 40, 13, 41]
    assert rows[4:6] == [(7 * 4 + 3) % 96, (7 * 5 + 3) % 96]  # nothing samples a discarded chunk's rows
    assert rows[6:] == [21, 22, 23, 60]  # every draft kept, then the bonus
    logits = verified_logits.logits_as_verified(batch, sampled, 96)
    assert logits.argmax(dim=1).tolist() == rows


def test_a_rejected_draft_the_target_chooses_is_refused_by_name():
    rejected = DECODE._replace(sampled=[11, 12, -1, -1])  # draft 1 (12) rejected, the target's token 12
    batch, sampled = to_batch(BatchCase(CONFIG, [rejected], seed=0), torch.device("cpu"), True)
    with pytest.raises(ValueError, match=r"^request 0: draft 1 \(12\) rejected with the target choosing it"):
        verified_logits.verified_rows(batch, sampled, 96)


# A step of four hidden rows, rows 1 and 3 equal (the simulator's hidden states may repeat); each row's logits choose
# its own id (10 + row). The runner samples rows 2 and 3.
ROWS = torch.tensor([[0.0, 1.0], [2.0, 2.0], [5.0, 0.5], [2.0, 2.0]])
LOGITS = torch.nn.functional.one_hot(torch.tensor([10, 11, 12, 13]), 16).float()
SAMPLED = torch.tensor([2, 3])


def test_the_lm_head_gives_each_sampled_row_its_own_logits():
    head = verified_logits.TargetHead(ROWS, LOGITS, SAMPLED)
    # row 3 equals row 1, and is handed at its sampled position: its own logits, not row 1's
    assert head.compute_logits(ROWS[SAMPLED]).argmax(dim=1).tolist() == [12, 13]


def test_a_row_handed_elsewhere_gets_the_logits_of_the_row_it_is():
    head = verified_logits.TargetHead(ROWS, LOGITS, SAMPLED)
    # a runner that samples rows 0 and 2 where 2 and 3 are due: row 0's values give row 0's logits, as a real head's
    assert head.compute_logits(ROWS[torch.tensor([0, 2])]).argmax(dim=1).tolist() == [10, 12]


def test_a_row_of_no_step_is_refused_by_name():
    head = verified_logits.TargetHead(ROWS, LOGITS, SAMPLED)
    with pytest.raises(LookupError, match=r"^hidden row 1 handed to the lm head is none of the step's rows$"):
        head.compute_logits(torch.tensor([[5.0, 0.5], [9.0, 9.0]]))
