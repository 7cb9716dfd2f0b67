"""A serving loop around the proposer: scheduling, target verification, requests leaving.

Each iteration schedules decodes (the next token plus last iteration's
drafts) and chunked prefills under a token budget, runs the tiny target on
the scheduled rows, verifies the drafts, and yields exactly the inputs of one
propose call, as a ``BatchCase`` (plain lists) plus the target's hidden
states. After the caller has proposed, ``commit`` takes the drafts back.

The schedule is the loop's own, or another scheduler's (``Scheduler``: vLLM's,
``sim.impls.kit.vllm_schedule``), which then decides which requests run, how
many tokens each, which drafts are verified, their KV blocks, preemption and
when a request is done.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import NamedTuple, Protocol

import numpy as np
import torch

from mtp.config import ProposerConfig
from sim.models.block_allocator import BlockAllocator
from sim.models.mrope import mrope_rows
from sim.models.tiny import TinyMtp, TinyTarget
from sim.oracle.cases import BatchCase, RequestCase
from sim.serving.scenario import Scenario


@dataclass
class RequestState:
    rid: int
    tokens: list[int]  # prompt + accepted outputs
    prompt_len: int
    max_new_tokens: int
    num_computed: int = 0  # tokens in KV
    blocks: list[int] = field(default_factory=list)
    drafts: list[int] = field(default_factory=list)  # to verify next iteration
    expected: list[int] = field(default_factory=list)  # accept="reference": the reference's drafts
    prefill_len: int = 0  # the tokens its prefill computes: the prompt, or all it holds once preempted

    def __post_init__(self):
        self.prefill_len = self.prefill_len or self.prompt_len

    @property
    def prefilling(self) -> bool:
        return self.num_computed < self.prefill_len

    def preempted(self) -> None:
        """Its KV dropped by a scheduler: it computes every token it holds again, as a prefill."""
        self.num_computed, self.prefill_len, self.drafts, self.expected = 0, len(self.tokens), [], []

    @property
    def num_outputs(self) -> int:
        return len(self.tokens) - self.prompt_len


class Iteration(NamedTuple):
    """One propose call's inputs, and what the reference needs to check it.

    histories: per request, tokens at positions 0..L where L is the accepted
               length (the last one is the token drafting continues from).
    compared:  per request, whether its drafts are used (not a partial prefill).
    accepted:  per request, (drafts verified, drafts accepted).
    mrope:     under M-RoPE, per request, the 3 rows of positions 0..L+K-2
               (every position its drafts reach); else None.
    """

    index: int
    case: BatchCase
    hidden: torch.Tensor
    rids: list[int]
    histories: list[list[int]]
    compared: list[bool]
    accepted: list[tuple[int, int]]
    mrope: list[list[list[int]]] | None = None


class SchedulerDefect(RuntimeError):
    """Another scheduler scheduled a step that no correct model runner and drafter can serve as the spec
    says (the scheduler's defect, named in the message with its upstream report): the run stops there
    instead of judging the implementation on it."""


class Scheduler(Protocol):
    """Another scheduler than the loop's own: it is told each request as it arrives (``add``), picks each
    iteration's requests and their rows (``schedule``: a running request it preempted is told so,
    ``RequestState.preempted``; each picked one holds its blocks and the drafts it verifies; a request it
    finished may be picked once more, by a step it scheduled before it knew), and takes each iteration's
    sampled tokens and new drafts (``commit``), returning the requests it has finished; on a decode node it
    asks the loop to load a request's prompt KV into the blocks it allocated (``receive``, which the loop
    sets), and hands requests it runs out of blocks for to a prefill node (``sent_back``)."""

    receive: object  # (request, blocks) -> None: its prompt's KV loaded into those blocks

    def add(self, req: RequestState) -> None: ...

    def sent_back(self) -> set[int]:
        """The requests handed to another node since it was last asked: they leave this one with their tokens."""

    def schedule(self, running: dict[int, RequestState]) -> list[tuple[RequestState, list[int]]]: ...

    def commit(self, rids: list[int], sampled: list[list[int]], drafts: list[list[int]]) -> set[int]: ...


class ServingSim:
    """``reference_drafter``: under ``accept="reference"``, ``drafts(history, mrope)`` of a correct
    proposer (sim/serving/acceptance.py), which the verifier accepts drafts against. ``transfer``: on a
    decode node (``Scenario.decode_node``), ``transfer(request)`` puts an arriving request's prompt KV in
    the draft's cache (``transfer_prompt_kv``). ``scheduler``: where the scenario's schedule is another
    scheduler's (``Scenario.scheduler``), that scheduler."""

    def __init__(self, scenario: Scenario, target: TinyTarget, reference_drafter=None, transfer=None, scheduler=None):
        if scenario.accept == "reference" and reference_drafter is None:
            raise ValueError("accept='reference': the serving loop needs the reference's drafts (reference_drafter)")
        if scenario.decode_node and transfer is None:
            raise ValueError("decode_node=True: the serving loop needs the prompts' KV transfer (transfer)")
        self.transfer = transfer
        self.scheduler: Scheduler | None = scheduler
        if scheduler is not None and scenario.decode_node:  # its connector loads the prompts into its blocks
            scheduler.receive = self._receive
        self.sc = scenario
        self.target = target
        self.reference_drafter = reference_drafter
        self.rng = np.random.default_rng(scenario.seed + 7)
        # the prefix every prompt shares: a stream of its own, so prompts without one stay as they were
        self.shared = np.random.default_rng(scenario.seed + 11).integers(0, scenario.vocab_size, scenario.shared_prefix)
        self.allocator = BlockAllocator(scenario.num_blocks, scenario.seed)
        self.waiting = sorted(enumerate(scenario.requests), key=lambda x: x[1].arrival)
        self.running: list[RequestState] = []
        self.leaving: dict[int, RequestState] = {}  # finished by another scheduler after it scheduled the next step
        self.finished = 0
        self.outputs: dict[int, list[int]] = {}  # each finished request's tokens, its prompt first
        self.config = ProposerConfig(
            num_spec_tokens=scenario.num_spec_tokens,
            vocab_size=scenario.vocab_size,
            block_size=scenario.block_size,
            max_model_len=scenario.max_model_len,
            # a draft model's first pass adds a row per request to what was scheduled (as vLLM reserves)
            max_num_tokens=scenario.token_budget + (scenario.max_num_reqs if scenario.method == "draft_model" else 0),
            max_num_reqs=scenario.max_num_reqs,
            hidden_size=scenario.hidden_size,
            uses_mrope=scenario.mrope,
            method=scenario.method,
        )

    @property
    def done(self) -> bool:
        return not self.waiting and not self.running and not self.leaving

    def _admit(self, it: int) -> None:
        while self.waiting and self.waiting[0][1].arrival <= it and self._room():
            rid, spec = self.waiting.pop(0)
            prompt = self.rng.integers(0, self.sc.vocab_size, size=spec.prompt_len)
            shared = min(spec.prompt_len, len(self.shared))
            prompt[:shared] = self.shared[:shared]
            prompt = prompt.tolist()
            req = RequestState(rid, prompt, spec.prompt_len, spec.max_new_tokens)
            # prefilled elsewhere: its KV and the token sampled after it arrive (another scheduler's: its connector
            # asks for the KV once it allocated the blocks, ``_receive``)
            if self.sc.decode_node and self.scheduler is None:
                req.tokens = prompt + [self._first_token(prompt)]
                req.num_computed = spec.prompt_len
                self._ensure_blocks(req, spec.prompt_len)
                self.transfer(req)
            if self.scheduler is not None:
                self.scheduler.add(req)
            self.running.append(req)

    def _send_back(self, rids: set[int]) -> None:
        """The requests another node takes over leave this one, their tokens so far its output."""
        for req in [r for r in self.running if r.rid in rids]:
            self.running.remove(req)
            self.outputs[req.rid] = list(req.tokens)

    def _receive(self, req: RequestState, blocks: list[int]) -> None:
        """Another scheduler's decode node: ``req``'s prompt KV, as the prefill node wrote it (its draft KV at the
        last position from the token it sampled), loaded into ``blocks``; the request computes its last prompt
        token again, to sample its first output token."""
        prompt = req.tokens[: req.prompt_len]
        self.transfer(dataclasses.replace(req, tokens=prompt + [self._first_token(prompt)], blocks=list(blocks)))

    def _room(self) -> bool:
        """Whether an arriving request is taken now: another scheduler queues every one itself."""
        return self.scheduler is not None or len(self.running) < self.sc.max_num_reqs

    def _first_token(self, prompt: list[int]) -> int:
        """The token a prefill node samples after ``prompt`` (the target's greedy choice)."""
        return self.target.greedy(self._prompt_hidden(prompt))[-1].item()

    def _prompt_hidden(self, prompt: list[int]) -> torch.Tensor:
        """The target's hidden states over a whole prompt (its last layer's)."""
        t = torch.tensor(prompt, dtype=torch.int64)
        return self.target.hidden(t, torch.cat([t[:1], t[:-1]]), torch.arange(len(prompt)))

    def _schedule(self) -> list[tuple[RequestState, list[int]]]:
        budget = self.sc.token_budget
        picked = []
        for req in sorted(self.running, key=lambda r: r.prefilling):  # decodes first
            if req.prefilling:
                n = min(req.prompt_len - req.num_computed, budget)
                rows = req.tokens[req.num_computed : req.num_computed + n]
            else:
                rows = [req.tokens[-1]] + req.drafts
            if not rows or len(rows) > budget:
                continue
            budget -= len(rows)
            picked.append((req, rows))
        return picked

    def _ensure_blocks(self, req: RequestState, seq_len: int) -> None:
        last = seq_len + self.sc.num_spec_tokens - 2 + self.config.extra_rows_per_request
        last = min(last, self.sc.max_model_len - 1)
        need = last // self.sc.block_size + 1 - len(req.blocks)
        if need > 0:
            req.blocks += self.allocator.allocate(need)

    def _accept_count(self, req: RequestState, greedy: list[int]) -> int:
        k = len(req.drafts)
        if self.sc.accept == "greedy":
            a = 0
            while a < k and req.drafts[a] == greedy[a]:
                a += 1
            return a
        if self.sc.accept == "reference":  # the target takes a random count of the reference's drafts
            a = 0
            while a < k and a < len(req.expected) and req.drafts[a] == req.expected[a]:
                a += 1
            return min(a, int(self.rng.integers(0, k + 1)))
        if self.sc.accept == "random":
            return int(self.rng.integers(0, k + 1))
        return k if self.sc.accept == "all" else 0

    def step(self, it: int) -> Iteration | None:
        """Schedule and verify one iteration (``last``, until the next); None if nothing could be scheduled."""
        self._admit(it)
        if self.scheduler is not None:
            picked = self.scheduler.schedule(self.leaving | {req.rid: req for req in self.running})
            self.leaving = {req.rid: req for req, _ in picked if req.rid in self.leaving}  # run once more, or gone
            self._send_back(self.scheduler.sent_back())
        else:
            picked = self._schedule()
        if not picked:
            return None
        k_max = self.sc.num_spec_tokens
        reqs, hiddens, histories, compared, accepted = [], [], [], [], []
        for req, rows in picked:
            c = req.num_computed
            seq = req.tokens[:c] + rows
            seq_len = len(seq)
            t = torch.tensor(seq[c:], dtype=torch.int64)
            prev = torch.tensor([seq[max(p - 1, 0)] for p in range(c, seq_len)], dtype=torch.int64)
            h = self.target.hidden(t, prev, torch.arange(c, seq_len))
            greedy = self.target.greedy(h).tolist()
            if self.sc.method == "eagle3":  # the proposer gets the auxiliary layers; verification the last
                h = self.target.aux_hidden(t, prev, torch.arange(c, seq_len))
            if self.scheduler is None:
                self._ensure_blocks(req, seq_len)
            if req.prefilling:  # with another scheduler's placeholder drafts past its last token: none accepted
                drafts, a = len(req.drafts), 0
                end = seq_len - drafts
                partial = end < req.prefill_len
                sampled = [greedy[end - c - 1]]
                history = req.tokens[: end + 1] if partial else req.tokens[:end] + sampled
            else:
                drafts = len(req.drafts)
                a = self._accept_count(req, greedy)
                while self.sc.runner_samples and a < drafts and req.drafts[a] == greedy[a]:
                    a += 1  # a rejection sampler keeps a draft the target chooses
                partial = False
                sampled = req.drafts[:a] + [greedy[a]]
                history = req.tokens + sampled
            backup = history[seq_len] if seq_len < len(history) else history[-1]
            reqs.append(
                RequestCase(
                    tokens=rows + [backup],
                    num_computed=c,
                    query_len=len(rows),
                    num_drafts=drafts,
                    sampled=sampled + [-1] * (k_max + 1 - len(sampled)),
                    discarded=partial,
                    blocks=list(req.blocks),
                    mrope=self._mrope(req, range(c, seq_len)),
                )
            )
            hiddens.append(h)
            histories.append(history)
            compared.append(not partial)
            accepted.append((0 if req.prefilling else drafts, a))  # placeholders are no drafts to accept
        case = BatchCase(config=self.config, requests=reqs, seed=self.sc.seed)
        rids = [req.rid for req, _ in picked]
        mrope = None
        if self.sc.mrope:
            mrope = [self._mrope(req, range(len(h) + k_max - 1)) for (req, _), h in zip(picked, histories)]
        self.last = Iteration(it, case, torch.cat(hiddens), rids, histories, compared, accepted, mrope)
        return self.last

    def _mrope(self, req: RequestState, positions: range) -> list[list[int]] | None:
        """The request's M-RoPE rows at ``positions`` (its image drawn from the scenario seed and its id)."""
        return mrope_rows(req.prompt_len, self.sc.seed + req.rid, positions) if self.sc.mrope else None

    def commit(self, iteration: Iteration, drafts: list[list[int]]) -> None:
        """Take the verified tokens and the new drafts; retire finished requests."""
        if self.scheduler is not None:  # a partial prefill's sample and drafts are discarded
            kept = [not r.discarded for r in iteration.case.requests]
            sampled = [[t for t in r.sampled if t >= 0] if k else [] for r, k in zip(iteration.case.requests, kept)]
            done = self.scheduler.commit(iteration.rids, sampled, [list(d) if k else [] for d, k in zip(drafts, kept)])
        else:
            done = None
        by_id = self.leaving | {r.rid: r for r in self.running}
        for r, (rid, history, req_case, new_drafts) in enumerate(
            zip(iteration.rids, iteration.histories, iteration.case.requests, drafts)
        ):
            req = by_id[rid]
            if req_case.discarded:
                req.num_computed = req_case.seq_len
                continue
            req.tokens = history
            req.num_computed = len(history) - 1
            room = self.sc.max_model_len - len(history)  # positions left after the next token
            req.drafts = list(new_drafts[: max(0, min(self.sc.num_spec_tokens, room))])
            if self.reference_drafter is not None:
                req.expected = self.reference_drafter(history, iteration.mrope[r] if iteration.mrope else None)
        still, self.leaving = [], {}
        for req in self.running:
            if done is None and (req.num_outputs >= req.max_new_tokens or len(req.tokens) > self.sc.max_model_len):
                self.allocator.release(req.blocks)
            elif done is not None and req.rid in done:
                self.leaving[req.rid] = req  # its blocks are the scheduler's; a step it scheduled already may run it
            else:
                still.append(req)
                continue
            self.finished += 1
            self.outputs[req.rid] = list(req.tokens)
        self.running = still


def transfer_prompt_kv(draft: TinyMtp, target: TinyTarget, req: RequestState, block_size: int) -> None:
    """The draft layer's KV of ``req``'s prompt in ``draft``'s cache, as a prefill node's correct
    proposer wrote it and its KV transfer hands it to a decode node: position p holds the draft's keys
    and values of the token after it (at the last position, the token the prefill node sampled) over
    the target's hidden state at p (eagle3: its auxiliary layers, folded), at the request's slots; a draft
    model's, of the token at p itself (it reads no hidden state)."""
    n, device = req.prompt_len, draft.embed.device
    t = torch.tensor(req.tokens[:n], dtype=torch.int64)
    prev, positions = torch.cat([t[:1], t[:-1]]), torch.arange(n)
    if draft.cfg.eagle3:
        hidden = draft.combine_hidden_states(target.aux_hidden(t, prev, positions).to(device))
    else:
        hidden = target.hidden(t, prev, positions).to(device)
    shift = 0 if draft.cfg.draft_model else 1
    ids = torch.tensor(req.tokens[shift : n + shift], dtype=torch.int64, device=device)
    _, k, v = draft.qkv(draft.block_input(ids, hidden), positions.to(device))
    slots = torch.tensor([req.blocks[p // block_size] * block_size + p % block_size for p in range(n)])
    draft.cache.write(slots.to(device), k, v)
