"""The target's logits that a step's verification stands for, for a runner that samples them itself.

Under ``Scenario.runner_samples`` the harness does not hand a runner sampled tokens: it hands the target's logits,
each scheduled row choosing, by a wide margin, the id the call's verification decided (``verified_rows``), so that
the runner's own sampler and rejection sampler sample what the reference verified; ``TargetHead`` is a target's lm
head that gives a runner those logits for the hidden rows it samples (a runner that computes its own logits). Shared
by every adapter whose runner samples (vllm-ascend's V1 runner and its Model Runner V2).
"""

from __future__ import annotations

import numpy as np
import torch

from mtp.batch import SampledTokens, VerifiedBatch

# A logits row's chosen id, and every other id: at temperature 1 another id is drawn with a probability
# below vocab_size * e^-40 (about 1e-15), so a random request samples and accepts what the verification decided.
FAR, NEAR = 20.0, -20.0


def verified_rows(batch: VerifiedBatch, sampled: SampledTokens, vocab_size: int) -> list[int]:
    """The id each scheduled row's logits choose, as the call's verification decided it: a request's
    draft rows choose its kept drafts, then the sampled token at the first draft rejected (any later
    draft row its own draft, and the bonus row an id nothing keeps), or the bonus token if all were kept;
    a request without drafts, its sampled token at its last row. Rows nothing samples choose an id of
    their index. ``ValueError`` where no rejection sampler gives the verification: a draft rejected
    although the target chooses it, or kept drafts that are not the request's."""
    ids = batch.token_ids.tolist()
    qsl = np.asarray(batch.query_start_loc_cpu)
    rows = [(7 * t + 3) % vocab_size for t in range(batch.num_tokens)]
    for r in range(batch.num_reqs):
        k, end = int(batch.num_draft_tokens_cpu[r]), int(qsl[r + 1])
        first = end - 1 - k
        drafts = ids[first + 1 : end]
        out = sampled.padded[r].tolist() if sampled.is_padded else list(sampled.lists[r])
        valid = [t for t in out if 0 <= t < vocab_size]
        if sampled.discarded[r]:
            continue
        if not valid:
            raise ValueError(f"request {r}: no valid sampled token, though not discarded")
        a = len(valid) - 1
        if valid[:a] != drafts[:a]:
            raise ValueError(f"request {r}: kept {valid[:a]}, its drafts are {drafts[:a]}")
        if a < k and valid[a] == drafts[a]:
            raise ValueError(
                f"request {r}: draft {a} ({drafts[a]}) rejected with the target choosing it: no rejection"
                " sampler gives that (a serving loop under Scenario.runner_samples keeps such a draft)"
            )
        for j in range(k + 1):
            rows[first + j] = valid[j] if j <= a else drafts[j] if j < k else (valid[a] + 1) % vocab_size
    return rows


def logits_as_verified(batch: VerifiedBatch, sampled: SampledTokens, vocab_size: int) -> torch.Tensor:
    """[T, V]: the target's logits at each scheduled row, choosing ``verified_rows``' ids by a wide margin."""
    chosen = torch.tensor(verified_rows(batch, sampled, vocab_size), dtype=torch.int64)
    logits = torch.full((batch.num_tokens, vocab_size), NEAR, dtype=torch.float32)
    logits[torch.arange(batch.num_tokens), chosen] = FAR
    return logits.to(batch.token_ids.device)


class TargetHead(torch.nn.Module):
    """The target's lm head on one step: the logits the verification decided for each row the runner samples
    (``rows``: the step's hidden states; ``logits``: each row's logits; ``sampled``: the rows the input batch's
    ``logits_indices`` name). A hidden row handed at a sampled position gives that row's logits; one of another
    row's values, that row's (the simulator's hidden states may repeat, its verification decides by row); one of
    no row of the step is a ``LookupError``."""

    def __init__(self, rows: torch.Tensor, logits: torch.Tensor, sampled: torch.Tensor):
        super().__init__()
        self.rows, self.logits, self.sampled = rows, logits, sampled

    def compute_logits(self, hidden_states: torch.Tensor) -> torch.Tensor:
        n = hidden_states.shape[0]
        expected = self.sampled[:n] if n <= self.sampled.shape[0] else None
        match = (hidden_states[:, None, :] == self.rows[None, :, :]).all(-1)
        missing = (~match.any(dim=1)).nonzero()
        if missing.numel():
            raise LookupError(f"hidden row {int(missing[0])} handed to the lm head is none of the step's rows")
        found = match.to(torch.int8).argmax(dim=1)
        if expected is not None:  # a row at its sampled position is that row, whatever other row it equals
            found = torch.where(match[torch.arange(n), expected], expected, found)
        return self.logits[found]
