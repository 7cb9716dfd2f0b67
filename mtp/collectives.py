"""A proposer's place in a process group, and the checked all-gather every grouped proposer issues.

Prefill context parallel, lm-head tensor parallel and shared-expert data
parallel all exchange rows with one collective, an all-gather. Ranks that
issue different sequences of it hang on HCCL and NCCL (gloo aborts), so each
gather is checked: a fixed-shape header (collective number, draft step,
element count) goes first, and ranks that diverged are told so, by name.
"""

from __future__ import annotations

from collections.abc import Callable

import torch

END_STEP = 0  # the draft step of the closing gather (``GroupRank.close_collectives``)


class CollectiveError(RuntimeError):
    """A collective failed or timed out, usually because another rank is elsewhere."""


class CollectiveMismatchError(CollectiveError):
    """Ranks issued different collectives: on hardware, a hang."""


class GroupRank:
    """Mixin for an ``MtpProposer`` on rank ``rank`` of a group of ``size``; ``all_gather``
    concatenates every rank's rows, rank 0's first (``devices.collectives.all_gather_rows``).
    Listed before ``MtpProposer``, it takes the three group arguments and passes the rest on."""

    def __init__(self, *args, rank: int, size: int, all_gather: Callable[[torch.Tensor], torch.Tensor], **kwargs):
        if not 0 <= rank < size:
            raise ValueError(f"rank={rank!r}: must lie in [0, size={size})")
        self.group_rank, self.group_size = rank, size
        self._all_gather = all_gather
        self.collectives = 0
        self._step_tag = 1
        super().__init__(*args, **kwargs)

    def _set_step(self, step: int) -> None:
        super()._set_step(step)
        self._step_tag = step

    def _load_first_pass(self, *args) -> None:
        super()._load_first_pass(*args)
        self._step_tag = 1

    def close_collectives(self) -> None:
        """One last checked gather, after a driver's last call: a rank that issued fewer gathers than
        its peers meets a peer's gather here, and both are told at once instead of the peer waiting
        out the collective timeout."""
        self._step_tag = END_STEP
        self.gather(self.seq_lens.new_zeros(1))

    def gather(self, tensor: torch.Tensor) -> torch.Tensor:
        """All-gather over the group, checked (``checked_all_gather``)."""
        self.collectives += 1
        return checked_all_gather(
            self._all_gather,
            tensor,
            self.group_rank,
            self.group_size,
            (self.collectives, self._step_tag),
            self.in_capture,
        )


def checked_all_gather(all_gather, tensor: torch.Tensor, rank: int, size: int, tag: tuple[int, int], in_capture: bool):
    """``all_gather(tensor)``, checked: every rank must issue the same sequence.

    ``tag`` is (collective number, draft step). Reading the headers back costs one
    host sync; inside a graph capture there is none (replays repeat a sequence
    that was checked eagerly).
    """

    def gathered(t: torch.Tensor) -> torch.Tensor:
        try:
            return all_gather(t)
        except Exception as exc:
            raise CollectiveError(f"collective #{tag[0]} on rank {rank} failed: {exc}") from exc

    if not in_capture:
        headers = gathered(torch.tensor([*tag, tensor.numel()], device=tensor.device)).view(size, 3).tolist()
        if any(h != headers[0] for h in headers):
            seen = ", ".join(
                f"rank {r}: "
                + ("the closing gather" if s == END_STEP else f"collective #{c} of step {s} ({n} elements)")
                for r, (c, s, n) in enumerate(headers)
            )
            raise CollectiveMismatchError(f"ranks are at different collectives: {seen}")
    return gathered(tensor)
