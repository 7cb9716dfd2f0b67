"""A serving scenario: everything a simulated run depends on, as JSON.

A scenario replays bit for bit: the models, prompts, arrivals and forced
acceptance all derive from its fields.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

ACCEPT_POLICIES = ("greedy", "all", "none", "random")
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

    def __post_init__(self):
        if self.accept not in ACCEPT_POLICIES:
            raise ValueError(f"accept={self.accept!r}: expected one of {ACCEPT_POLICIES}")
        if self.graph_mode not in GRAPH_MODES:
            raise ValueError(f"graph_mode={self.graph_mode!r}: expected one of {GRAPH_MODES}")
        if self.token_budget < self.num_spec_tokens + 1:
            raise ValueError(
                f"token_budget={self.token_budget!r}: a decode needs num_spec_tokens + 1 = {self.num_spec_tokens + 1}"
            )
        for r in self.requests:
            if not 1 <= r.prompt_len < self.max_model_len:
                raise ValueError(f"prompt_len={r.prompt_len!r}: must lie in [1, max_model_len={self.max_model_len})")

    @property
    def num_blocks(self) -> int:
        """Enough for every running request at full length, plus spares to shuffle."""
        per_req = -(-(self.max_model_len + self.num_spec_tokens) // self.block_size)
        return self.max_num_reqs * per_req + 8

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1)

    @classmethod
    def from_dict(cls, data: dict) -> Scenario:
        data = dict(data)
        data["requests"] = tuple(RequestSpec(**r) for r in data.get("requests", ()))
        return cls(**data)

    @classmethod
    def load(cls, path: str | Path) -> Scenario:
        return cls.from_dict(json.loads(Path(path).read_text()))

    def save(self, path: str | Path) -> Path:
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self.to_json() + "\n")
        return path


def default_scenario(seed: int = 0, num_requests: int = 24, padded: bool = True, accept: str = "random") -> Scenario:
    """A mixed workload: staggered arrivals, prompts longer than the token budget."""
    import numpy as np

    rng = np.random.default_rng(seed)
    reqs = tuple(
        RequestSpec(arrival=int(i // 3), prompt_len=int(rng.integers(4, 80)), max_new_tokens=int(rng.integers(4, 40)))
        for i in range(num_requests)
    )
    return Scenario(seed=seed, padded=padded, accept=accept, requests=reqs, max_model_len=96, max_iterations=400)
