"""The ops face of an upstream runner's steps 1-3: ``prepare_call`` by the upstream helpers, with the batch.

The core's ``CoreOps.prepare_call`` computes step 1 from the sampled tokens alone; an upstream
proposer's step 1 (``prepare_next_token_ids_*``) reads request states built from the batch, so
``RunnerStepOps.prepare_call`` hands it the batch (``_next_tokens``). ``HelperOps`` is the common
case: steps 1 and 2-3 are two upstream helpers of one shared proposer, handed to the class by the
generation (``step_one``, ``steps_two_three``), and the first pass is vLLM's spec metadata read back
as the core's ``FirstPassInputs``. Validation is the core's.
"""

from __future__ import annotations

import torch

from mtp.batch import FirstPassInputs, NextTokens, SampledTokens, VerifiedBatch
from mtp.config import ProposerConfig
from mtp.ops import CoreOps, PreparedCall
from sim.impls.kit.vllm_types import first_pass_from_vllm


class RunnerStepOps(CoreOps):
    """Steps 1-4 by an upstream runner's functions; validation and the step wiring are the core's."""

    def next_tokens(self, cfg: ProposerConfig, sampled: SampledTokens, device: torch.device) -> NextTokens:
        raise NotImplementedError(f"{type(self).__name__} needs the batch: prepare_call calls _next_tokens")

    def _next_tokens(self, cfg: ProposerConfig, batch: VerifiedBatch, sampled: SampledTokens) -> NextTokens:
        raise NotImplementedError(f"{type(self).__name__} has no step 1")

    def prepare_call(self, cfg: ProposerConfig, batch: VerifiedBatch, sampled: SampledTokens) -> PreparedCall:
        """``CoreOps.prepare_call`` with the upstream step 1, which reads request states built from the batch."""
        self.validate(cfg, batch, sampled)
        nxt = self._next_tokens(cfg, batch, sampled)
        return self.first_pass(cfg, batch, self.prepare(cfg, batch, sampled, nxt), nxt)


class HelperOps(RunnerStepOps):
    """Steps 1-3 by a generation's two helpers on its shared proposer.

    A subclass names ``helpers(cfg, padded)`` (the shared proposer, set to the call's sizes),
    ``step_one(p, batch, sampled, vocab_size) -> NextTokens`` and ``steps_two_three(p, batch, sampled,
    valid_counts, triton) -> (spec metadata, token indices, sample indices or None, rejected counts)``.
    ``accepted_field``: the spec metadata's field the generation's later steps start from (None: the
    core's rule, ``seq_lens - n_rej`` padded). ``triton``: ``prepare_inputs_padded`` through its
    Triton kernel (in the interpreter on CPU), where the generation has one: what an accelerator runs,
    so the default; False: its torch fallback.
    """

    accepted_field: str | None = None

    @property
    def decided_in_the_loop(self) -> tuple[str, ...]:
        """The ``Rules`` fields these ops do not decide: with ``accepted_field``, what the later steps
        start from is read off the spec metadata, an intermediate the propose loop may still lower
        before its steps (as vLLM's ``propose`` does); the serving runs hold it, on what attention reads."""
        return ("padded_seq_lens_lowered",) if self.accepted_field is not None else ()

    def __init__(self, triton: bool = True):
        self.triton = triton

    def helpers(self, cfg: ProposerConfig, padded: bool):
        raise NotImplementedError(f"{type(self).__name__} names no shared proposer")

    def _next_tokens(self, cfg: ProposerConfig, batch: VerifiedBatch, sampled: SampledTokens) -> NextTokens:
        return self.step_one(self.helpers(cfg, sampled.is_padded), batch, sampled, cfg.vocab_size)

    def prepare(
        self, cfg: ProposerConfig, batch: VerifiedBatch, sampled: SampledTokens, nxt: NextTokens
    ) -> FirstPassInputs:
        p = self.helpers(cfg, sampled.is_padded)
        spec_cad, rows, sample, rejected = self.steps_two_three(p, batch, sampled, nxt.valid_counts, self.triton)
        if sample is None:
            sample = spec_cad.query_start_loc[1:] - 1  # what the proposer samples when given no indices
        first = first_pass_from_vllm(spec_cad, rows, sample, rejected, cfg.max_num_tokens, padded=sampled.is_padded)
        if self.accepted_field is not None:
            first.accepted_seq_lens = getattr(spec_cad, self.accepted_field)[: batch.num_reqs].to(torch.int32).clone()
        return first
