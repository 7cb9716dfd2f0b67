"""Deliberately broken proposers: graph and device bugs from upstream history.

Each must make the suite fail (tests/meta/test_broken_caught.py).
"""

from __future__ import annotations

import bisect

import torch

from mtp.capture_sizes import CaptureSizes
from mtp.ops import CoreOps
from mtp.proposer import FIRST, STEP, MtpProposer
from tests.meta import broken_ops


class _DescendingSizes(CaptureSizes):
    """Capture sizes kept in descending order, padded with a bisect that assumes ascending."""

    def __init__(self, sizes, limit):
        super().__init__(sizes, limit)
        self.sizes = tuple(reversed(self.sizes))

    def pad(self, n):
        i = bisect.bisect_left(self.sizes, n)
        return self.sizes[i] if i < len(self.sizes) else None


class CaptureSizesWrongOrder(MtpProposer):
    """Bug class 3: sizes sorted the wrong way pad to the largest size (or none)."""

    def __init__(self, cfg, *args, **kwargs):
        super().__init__(cfg, *args, **kwargs)
        self.sizes = {phase: _DescendingSizes(s.sizes, max(s.sizes)) for phase, s in self.sizes.items()}


class CaptureSizesStaleCopy(MtpProposer):
    """Bug class 3: graphs captured from a stale copy of the sizes that lacks
    the largest one, which padding still picks."""

    def capture_all(self):
        largest = max(self.sizes[FIRST])
        real = self.sizes
        self.sizes = {phase: CaptureSizes([x for x in s if x != largest] or [1], largest) for phase, s in real.items()}
        try:
            super().capture_all()
        finally:
            self.sizes = real


class PaddedQslForSampleIndices(MtpProposer):
    """Bug class 4: sample indices from the graph-padded query_start_loc,
    whose last real request now ends at the padded row count."""

    def _load_first_pass(self, batch, prepared, rows):
        super()._load_first_pass(batch, prepared, rows)
        b = batch.num_reqs
        padded_qsl = self.query_start_loc.clone()
        padded_qsl[b] = rows
        self.sample_indices[:b] = (padded_qsl[1 : b + 1] - 1 - prepared.first.num_rejected).to(torch.int64)


class HostBoundNotAdvanced(MtpProposer):
    """Bug class 1: the host-side seq_len bound stays at the first pass's value."""

    def _step_bound(self, batch, step):
        return self._first_bound(batch)


class ReadBeforeSync(MtpProposer):
    """Bug class 6: a non-blocking device->host copy read before its event."""

    def drafts_to_host(self, drafts):
        host = self.device.pinned(tuple(drafts.shape), drafts.dtype)
        self.device.to_host(drafts, host, non_blocking=True)
        return host.tolist()


class BufferReplaced(MtpProposer):
    """Bug class 11: a persistent buffer rebound to a fresh tensor instead of copied into."""

    def _load_first_pass(self, batch, prepared, rows):
        self.positions = torch.zeros_like(self.positions)
        super()._load_first_pass(batch, prepared, rows)


class StepBakedAtCapture(MtpProposer):
    """Bug class 8: the step number baked into a captured graph as a Python value."""

    def _set_step(self, step):
        super()._set_step(step)
        self._step = step

    def _step_metadata(self, reqs):
        meta = self.ops.advance_step(
            self.cfg, self.base_positions[:reqs], self.accepted_seq_lens[:reqs], self._table(STEP, reqs), self._step
        )
        self.positions[:reqs] = meta.positions
        self.slot_mapping[:reqs] = meta.slot_mapping
        self.seq_lens[:reqs] = meta.seq_lens


class DummyRunLogitsOnce(MtpProposer):
    """Bug class 7: the dummy run (the one a rank with no requests issues to keep
    step with the others) computes logits once instead of K times."""

    def dummy_run(self, size):
        if self._may_capture:
            return super().dummy_run(size)
        self._load_inert(size)
        if size in self.sizes[FIRST] and self._graphed(FIRST):
            self._run(FIRST, size, 1)


class ReturnsDraftBuffer(MtpProposer):
    """Returns the persistent draft buffer itself, not a copy: the caller's
    drafts change under it at the next call (caught only by calls in sequence)."""

    def propose(self, batch, sampled):
        b = super().propose(batch, sampled).shape[0]
        return self.drafts[:b]


class StaleSlotsPastLastToken(MtpProposer):
    """Bug class 11: only the batch's own slots are copied in; graph-padding rows
    keep the slots an earlier call's draft steps left there, and write KV into
    live blocks (a fresh proposer holds -1 there: caught only by calls in sequence)."""

    def _load_first_pass(self, batch, prepared, rows):
        keep = self.slot_mapping.clone()
        super()._load_first_pass(batch, prepared, rows)
        n = prepared.first.num_tokens
        self.slot_mapping[n:] = keep[n:]


class _StepHiddenRowBefore(MtpProposer):
    """A known defect (``defect``, the ops it runs) plus step 2 fed the first pass's output one row
    before the sample row (draft 1 itself from the right row): next to the defect, only drafts 2..K
    change, and no metadata does, so only a reference that models the defect's drafts 2..K sees it."""

    defect = CoreOps

    def __init__(self, cfg, model, device, ops=None, **kwargs):
        super().__init__(cfg, model, device, ops=ops or self.defect(), **kwargs)

    def _first_sample(self, out, reqs):
        super()._first_sample(out, reqs)
        self.draft_hidden[:reqs] = out[(self.sample_indices[:reqs] - 1).clamp(min=0)]


class NotLoweredStepHiddenRowBefore(_StepHiddenRowBefore):
    """The 0.13-era padded defect (``broken_ops.PaddedSeqLensNotLowered``) plus a step-2 hidden row off by one."""

    defect = broken_ops.PaddedSeqLensNotLowered


class PlusOneStepHiddenRowBefore(_StepHiddenRowBefore):
    """The 0.13-era ``slot_mapping += 1`` (``broken_ops.SlotPlusOne``) plus a step-2 hidden row off by one."""

    defect = broken_ops.SlotPlusOne
