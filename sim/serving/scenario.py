"""A serving scenario: everything a simulated run depends on, as JSON.

A scenario replays bit for bit: the models, prompts, arrivals and forced
acceptance all derive from its fields.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path

from sim.oracle.rules import DRAFT_ATTNS

ACCEPT_POLICIES = ("greedy", "all", "none", "random", "reference")  # reference: sim/serving/acceptance.py
METHODS = ("mtp", "eagle", "eagle3", "draft_model")  # mtp.config.METHODS
# the serving loop's own schedule, vLLM's Scheduler (sim.impls.kit.vllm_schedule), or vllm-ascend's own: its
# balance scheduling, a decode node's recompute scheduler, the dynamic batch of releases up to 0.23.0, and main's
# waiting-queue orders (sim.impls.kit.ascend.schedulers)
SCHEDULERS = ("own", "vllm", "balance", "recompute", "dynamic_batch", "short_request_first", "batch_job_aware")
GRAPH_MODES = ("eager", "piecewise", "full")


@dataclass(frozen=True)
class RequestSpec:
    """A request: arrives at iteration ``arrival`` with a prompt, stops after ``max_new_tokens``."""

    arrival: int
    prompt_len: int
    max_new_tokens: int


@dataclass(frozen=True)
class Scenario:
    """One simulated serving run.

    graph_mode: ``eager``, ``piecewise`` or ``full`` (mtp.proposer.GraphMode).
    accept: how many drafts the target accepts: ``greedy`` (real
    verification), ``all``, ``none`` or ``random`` (uniform, from ``seed``).
    mrope: a multimodal model: prompts hold an image, positions are M-RoPE's
    [3, T] rows (``sim.models.mrope``) and the draft model rotates by them.
    method: ``mtp``; ``eagle`` (EAGLE-1: the same drafts from the target's
    last hidden states, through the implementation's EAGLE paths);
    ``eagle3``: the target hands its auxiliary hidden states, which the
    draft model combines before the first pass; or ``draft_model``: a small
    language model of its own on the token ids alone (no M-RoPE).
    tp: tensor-parallel ranks (``sim.ranks.tp``), each running one of the TP
    paths, and compared with one rank: ``lmhead_tp`` (the lm head's
    vocabulary split over them) and/or ``shared_expert_dp`` (the draft layer
    sequence parallel over them). One rank serves a scenario with tp 1.
    draft_attn_groups: how many attention groups the draft's layers form: 1, or 2 (a second layer of
    another backend in the same KV-cache group, as an MLA/SFA MTP layer and its indexer's key cache:
    each attends with its own group's metadata over a cache of its own, the draft model's heads split
    between them). An implementation that builds one group only lacks it (``Feature.DRAFT_ATTN_GROUPS``).
    draft_attn: the attention family of the draft layer: ``gqa``, or ``mla`` (a DeepSeek MTP layer's: its
    metadata, built by the implementation's MLA builder, carries the RoPE its queries and keys are rotated
    with), or ``sfa`` (a DeepSeek V3.2 / GLM-5 MTP layer's: MLA with a sparse indexer, its metadata built
    by the implementation's SFA builder, its lengths device tensors). An implementation without the
    family's builder lacks it (``Feature.MLA_DRAFT``, ``Feature.SFA_DRAFT``).
    dp: the data-parallel ranks this scenario's rank steps among (1: none). Each DP rank serves a batch of
    its own and pads its draft forwards to the largest rank's (vLLM's DP padding), so its first pass may
    run more rows than its batch has; what size, the ranks check together
    (``sim.impls.vllm_ascend.data_parallel``).
    decode_node: the decode node of a prefill/decode split: every request arrives with its prompt's KV
    in place (the target's and the draft layer's, as a prefill node's correct proposer wrote them and
    its KV transfer handed them over) and the first token the prefill node sampled, and starts with a
    one-token step that verifies no drafts (the KV consumer's first step). With ``scheduler="vllm"`` as
    vLLM's decode node has it: the prompt's KV loaded through vLLM's KV connector into the blocks its
    scheduler allocates, then the last prompt token computed again to sample the first token
    (``sim.impls.kit.remote_prefill``).
    async_scheduling: the model runner's asynchronous scheduling (vLLM's default where the drafter is
    padded): after each step the runner copies the valid sampled-token counts to the host on a side
    stream and hands the next step the tokens it continues from, and that step corrects the sequence
    lengths the scheduler counted ahead (every draft taken as accepted) by those counts. The drafts and
    each call's metadata are the synchronous run's; what the runner hands on is compared besides
    (``sim.oracle.next_step``). Padded only, as vLLM refuses it with ``disable_padded_drafter_batch``;
    an implementation with no model runner lacks it (``Feature.ASYNC_SCHEDULING``).
    runner_samples: the model runner samples the target's tokens itself: the target's logits, as the
    verification decides them, go through the implementation's own sampling (its rejection sampler and
    the bookkeeping of its input batch) and the drafter is handed what that sampled. What the runner
    reports and holds is compared besides (``sim.oracle.runner_samples``). The verification is then one
    a rejection sampler gives: a draft the target chooses is kept, never the one rejected. With
    ``async_scheduling``, the runner's asynchronous output (its host copy of the sampled tokens on a side
    stream) and the placeholder it books. An implementation with no model runner lacks it
    (``Feature.RUNNER_SAMPLES``).
    scheduler: ``own`` (the serving loop's rules: decodes first, then prefill chunks under the token
    budget, blocks enough for every request) or ``vllm``: vLLM's own ``Scheduler`` of the env's vLLM
    decides the requests, their chunks, the drafts verified, the KV blocks, preemption and when a request
    is done (``sim.impls.kit.vllm_schedule``; with ``async_scheduling``, its ``AsyncScheduler``, each step
    scheduled before the last one's output; one per DP rank, as each DP engine has its own; no TP ranks);
    or ``balance``: vllm-ascend's balance scheduling (``enable_balance_scheduling``): its
    ``BalanceScheduler``'s own copy of vLLM's schedule decides, and on DP ranks no rank admits a request
    while any rank ran its maximum of requests at the step before (``sim.impls.kit.ascend.schedulers``;
    vllm-ascend installed; not a decode node); or ``recompute``: a decode node's vllm-ascend
    ``RecomputeScheduler`` (``recompute_scheduler_enable``): its copy of the schedule, placeholder drafts for a
    request's first step, and a request it runs out of blocks for sent back to a prefill node
    (``decode_node=True``); or ``dynamic_batch``: vllm-ascend's ``SchedulerDynamicBatch``
    (``SLO_limits_for_dynamic_batch``, releases up to 0.23.0): its decode-first copy of the schedule, without
    the latency table its budget refiner reads (a deployment downloads it: without it the budget is the
    configured one); synchronous only, not a decode node; or main's waiting-queue orders over vLLM's schedule,
    which decide whom it admits next: ``short_request_first`` (``short_request_first_config``: preempted
    requests, then short prompts, then long ones; not a decode node) or ``batch_job_aware``
    (``batch_job_sched_config``: by prompt length, within the free blocks its reserve for the running requests
    leaves). What the options below say of ``vllm`` holds for them too.
    kv_blocks: with ``scheduler="vllm"``, the KV cache's blocks (0: enough for every request at full
    length): fewer make vLLM preempt requests, whose tokens are then computed again as a prefill.
    prefix_caching: with ``scheduler="vllm"``, vLLM's automatic prefix caching: a request whose prompt
    begins with full blocks another request computed starts past them, its drafts reading the draft
    layer's KV that request wrote (vLLM gives an EAGLE/MTP drafter's requests one block fewer, so the
    token after the hit is shared too).
    shared_prefix: the first tokens every prompt shares (up to its length), drawn from the seed; 0: none.
    kernel_block_size: a hybrid target's layout (linear-attention layers beside full attention, as Qwen3.5
    and Qwen3.6's): its attention blocks of ``block_size`` tokens, which vLLM makes as large as a mamba
    state's page, each split into kernel blocks of this many tokens, the attention kernels' block (the
    runner's block table holds kernel blocks); 0: the block size (no split).
    capture_sizes: the batch sizes graph modes capture at, in any order (a
    batch past the largest runs eagerly), at least one of them a step's
    ``max_num_reqs`` can use; None: the proposer's default, vLLM's list.
    """

    seed: int = 0
    num_spec_tokens: int = 3
    block_size: int = 4
    max_model_len: int = 96
    token_budget: int = 64
    max_num_reqs: int = 8
    padded: bool = True
    graph_mode: str = "eager"
    accept: str = "random"
    vocab_size: int = 96
    hidden_size: int = 32
    max_iterations: int = 40
    requests: tuple[RequestSpec, ...] = field(default_factory=tuple)
    mrope: bool = False
    method: str = "mtp"
    tp: int = 1
    lmhead_tp: bool = False
    shared_expert_dp: bool = False
    capture_sizes: tuple[int, ...] | None = None
    draft_attn_groups: int = 1
    draft_attn: str = "gqa"
    dp: int = 1
    decode_node: bool = False
    async_scheduling: bool = False
    runner_samples: bool = False
    scheduler: str = "own"
    kv_blocks: int = 0
    prefix_caching: bool = False
    shared_prefix: int = 0
    kernel_block_size: int = 0

    def __post_init__(self):
        if self.accept not in ACCEPT_POLICIES:
            raise ValueError(f"accept={self.accept!r}: expected one of {ACCEPT_POLICIES}")
        if self.method not in METHODS:
            raise ValueError(f"method={self.method!r}: expected one of {METHODS}")
        if self.method == "draft_model" and self.mrope:
            raise ValueError("mrope=True: method 'draft_model' runs its own positions, not the target's M-RoPE rows")
        if self.graph_mode not in GRAPH_MODES:
            raise ValueError(f"graph_mode={self.graph_mode!r}: expected one of {GRAPH_MODES}")
        if self.tp < 1:
            raise ValueError(f"tp={self.tp!r}: a group has at least one rank")
        if self.dp < 1:
            raise ValueError(f"dp={self.dp!r}: a group has at least one rank")
        if (self.tp > 1) != (self.lmhead_tp or self.shared_expert_dp):
            raise ValueError(
                f"tp={self.tp!r} with lmhead_tp={self.lmhead_tp!r}, shared_expert_dp={self.shared_expert_dp!r}:"
                " more than one TP rank runs a TP path, and a TP path runs on more than one rank"
            )
        if self.lmhead_tp and self.graph_mode == "full":
            raise ValueError("graph_mode='full' with lmhead_tp: lm-head TP computes logits outside the graphs")
        if self.draft_attn_groups not in (1, 2):
            raise ValueError(
                f"draft_attn_groups={self.draft_attn_groups!r}: expected 1 or 2 (the tiny draft has two heads)"
            )
        if self.draft_attn not in DRAFT_ATTNS:
            raise ValueError(f"draft_attn={self.draft_attn!r}: expected one of {DRAFT_ATTNS}")
        if self.draft_attn != "gqa" and (self.mrope or self.draft_attn_groups > 1):
            raise ValueError(
                f"draft_attn={self.draft_attn!r} with mrope={self.mrope!r}, draft_attn_groups={self.draft_attn_groups!r}:"
                " an MLA or SFA draft is one layer rotated at one position per row"
            )
        if self.decode_node and (self.mrope or self.draft_attn_groups > 1):
            raise ValueError(
                f"decode_node=True with mrope={self.mrope!r}, draft_attn_groups={self.draft_attn_groups!r}: a"
                " transferred prompt's KV is written for one draft layer at one position per row"
            )
        self._check_kernel_blocks()
        if self.async_scheduling and not self.padded:
            raise ValueError(
                "async_scheduling=True with padded=False: asynchronous scheduling needs the padded drafter"
                " (vLLM: 'Async scheduling is not compatible with disable_padded_drafter_batch=True')"
            )
        if self.token_budget < self.num_spec_tokens + 1:
            raise ValueError(
                f"token_budget={self.token_budget!r}: a decode needs num_spec_tokens + 1 = {self.num_spec_tokens + 1}"
            )
        for r in self.requests:
            if not 1 <= r.prompt_len < self.max_model_len:
                raise ValueError(f"prompt_len={r.prompt_len!r}: must lie in [1, max_model_len={self.max_model_len})")
        if self.capture_sizes is not None:
            self._check_capture_sizes()
        self._check_scheduler()

    def _check_scheduler(self) -> None:
        if self.scheduler not in SCHEDULERS:
            raise ValueError(f"scheduler={self.scheduler!r}: expected one of {SCHEDULERS}")
        if self.prefix_caching and self.scheduler == "own":
            raise ValueError(
                "prefix_caching=True with scheduler='own': prefix caching is vLLM's scheduler's (scheduler='vllm')"
            )
        if self.shared_prefix < 0:
            raise ValueError(f"shared_prefix={self.shared_prefix!r}: a prefix has no fewer than 0 tokens")
        if self.kv_blocks and self.scheduler == "own":
            raise ValueError(
                f"kv_blocks={self.kv_blocks!r} with scheduler='own': the loop's own schedule never preempts"
            )
        if self.scheduler != "own" and self.tp > 1:
            raise ValueError(
                f"scheduler={self.scheduler!r} with tp={self.tp!r}: vLLM's scheduler schedules one rank's batch (each"
                " DP rank's its own; vllm-ascend's TP ranks each serve a scenario of tp=1)"
            )
        if self.decode_node and self.prefix_caching:
            raise ValueError(
                "prefix_caching=True with decode_node=True: a decode node's prompts come through its KV connector;"
                " the prefix cache's hits beside those loads are not modelled"
            )
        if self.scheduler == "recompute" and not self.decode_node:
            raise ValueError(
                "scheduler='recompute' without decode_node=True: vllm-ascend's recompute scheduler serves a"
                " decode node of a prefill/decode split (a KV consumer) only"
            )
        if self.scheduler == "balance" and self.decode_node:
            raise ValueError(
                "scheduler='balance' with decode_node=True: a decode node runs on vLLM's own scheduler"
                " (scheduler='vllm'), its prompts' KV loaded through its KV connector; balance scheduling there is"
                " not driven"
            )
        if self.scheduler == "dynamic_batch" and (self.async_scheduling or self.decode_node):
            raise ValueError(
                "scheduler='dynamic_batch' with async_scheduling or decode_node: vllm-ascend's SchedulerDynamicBatch"
                " is a synchronous scheduler (under an asynchronous engine a deployment still builds it; not"
                " driven), on a node that computes its prompts"
            )
        if self.scheduler == "short_request_first" and self.decode_node:
            raise ValueError(
                "scheduler='short_request_first' with decode_node=True: vllm-ascend refuses ShortRequestFirst on a"
                " decode node (kv_role='kv_consumer'); it orders a node that computes its prompts"
            )
        least, most = self.kv_blocks_bounds
        if self.kv_blocks and not least <= self.kv_blocks <= most:
            raise ValueError(
                f"kv_blocks={self.kv_blocks!r}: expected 0 or a number in [{least}, {most}] (one request"
                " at max_model_len and the null block, up to enough for every request)"
            )

    def _check_kernel_blocks(self) -> None:
        k = self.kernel_block_size
        if k and not (0 < k < self.block_size and self.block_size % k == 0):
            raise ValueError(
                f"kernel_block_size={k!r}: expected 0 or a divisor of block_size={self.block_size} below it (a"
                " hybrid target's attention block split into kernel blocks)"
            )
        if k and (self.draft_attn != "gqa" or self.draft_attn_groups > 1):
            raise ValueError(
                f"kernel_block_size={k!r} with draft_attn={self.draft_attn!r}, draft_attn_groups="
                f"{self.draft_attn_groups!r}: a hybrid target's MTP layer is one GQA attention layer (Qwen3.5's)"
            )

    def _check_capture_sizes(self) -> None:
        sizes = self.capture_sizes
        if not isinstance(sizes, list | tuple) or not sizes or any(type(n) is not int for n in sizes):
            raise ValueError(f"capture_sizes={sizes!r}: expected a non-empty list of ints, or None")
        if any(not 1 <= n <= self.token_budget for n in sizes):
            raise ValueError(f"capture_sizes={list(sizes)!r}: each must lie in [1, token_budget={self.token_budget}]")
        if min(sizes) > self.max_num_reqs:
            raise ValueError(
                f"capture_sizes={list(sizes)!r}: none is at most max_num_reqs={self.max_num_reqs}, the steps' largest batch"
            )
        object.__setattr__(self, "capture_sizes", tuple(sizes))  # JSON gives a list; a scenario stays hashable

    @property
    def num_blocks(self) -> int:
        """The KV cache's blocks: ``kv_blocks``, or enough for every running request at full length, plus
        the null block and spares to shuffle."""
        return self.kv_blocks or self._default_blocks

    @property
    def kv_blocks_bounds(self) -> tuple[int, int]:
        """The ``kv_blocks`` vLLM's scheduler may have: one request at full length and the null block, up to
        the default (enough for every request)."""
        return self._blocks_per_request + 1, self._default_blocks

    @property
    def _blocks_per_request(self) -> int:
        return -(-(self.max_model_len + self.num_spec_tokens) // self.block_size)

    @property
    def _default_blocks(self) -> int:
        return self.max_num_reqs * self._blocks_per_request + 8

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_dict(cls, data: dict) -> Scenario:
        """The scenario ``data`` describes; ``ValueError`` names an unknown field or a value of the wrong type."""
        if not isinstance(data, dict):
            raise ValueError(f"scenario={type(data).__name__}: expected a JSON object")
        data = _typed_fields(cls, data, "")
        requests = data.get("requests", [])
        if not isinstance(requests, list | tuple):
            raise ValueError(f"requests={requests!r}: expected a list of objects")
        for i, r in enumerate(requests):
            if not isinstance(r, dict):
                raise ValueError(f"requests[{i}]={r!r}: expected an object")
        data["requests"] = tuple(
            RequestSpec(**_typed_fields(RequestSpec, r, f"requests[{i}].")) for i, r in enumerate(requests)
        )
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        """The scenario in a JSON file; ``ValueError`` names the file and what is wrong with it."""
        try:
            data = json.loads(Path(path).read_text())
        except FileNotFoundError:
            raise ValueError(f"{path}: no such file") from None
        except json.JSONDecodeError as exc:
            raise ValueError(f"{path}: not JSON ({exc})") from None
        try:
            return cls.from_dict(data)
        except ValueError as exc:
            raise ValueError(f"{path}: {exc}") from None

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json() + "\n")
        return path


def _typed_fields(cls, data: dict, prefix: str) -> dict:
    """``data`` checked against ``cls``'s fields: no unknown name, ints and bools and strings where the defaults are."""
    known = {f.name: f for f in fields(cls)}
    for name, value in data.items():
        if name not in known:
            raise ValueError(f"{prefix}{name}={value!r}: unknown field (known: {', '.join(known)})")
        want = {"int": int, "bool": bool, "str": str}.get(str(known[name].type))
        if want is not None and (type(value) is not want):
            raise ValueError(f"{prefix}{name}={value!r}: expected {known[name].type}")
    return dict(data)


def default_scenario(seed: int = 0, num_requests: int = 24, **fields_) -> Scenario:
    """A mixed workload: staggered arrivals, prompts longer than the token budget.

    ``fields_`` set any other ``Scenario`` field (``padded``, ``accept``,
    ``num_spec_tokens``, ``block_size``, ``max_model_len``, ``graph_mode``, ...);
    prompts stay below ``max_model_len``.
    """
    import numpy as np

    rng = np.random.default_rng(seed)
    max_model_len = fields_.pop("max_model_len", 96)
    k = fields_.get("num_spec_tokens", Scenario.num_spec_tokens)
    fields_.setdefault("token_budget", max(64, 2 * (k + 1)))  # room for a decode and some prefill
    longest = max(min(80, max_model_len - 1), 2)
    reqs = tuple(
        RequestSpec(
            arrival=int(i // 3),
            prompt_len=int(rng.integers(min(4, longest - 1), longest)),
            max_new_tokens=int(rng.integers(4, 40)),
        )
        for i in range(num_requests)
    )
    return Scenario(seed=seed, requests=reqs, max_model_len=max_model_len, max_iterations=400, **fields_)
