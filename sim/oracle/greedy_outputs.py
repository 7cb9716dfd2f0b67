"""What a request outputs with speculative decoding off: the target's own greedy decoding of its prompt.

Under greedy verification, drafting changes how many tokens a step accepts, never which: every request's
tokens must be the target's greedy decoding however its steps were scheduled (chunked, preempted and
computed again, counted ahead) and whatever was drafted (vLLM #10621: greedy output differing with spec
decoding on and off under asynchronous scheduling). Computed from the prompt alone, one token at a time.
"""

from __future__ import annotations

from sim.models.tiny import TinyTarget


def greedy_decoding(target: TinyTarget, prompt: list[int], length: int) -> list[int]:
    """``prompt`` and the target's greedy tokens after it, ``length`` tokens in all."""
    tokens = list(prompt)
    while len(tokens) < length:
        tokens.append(int(target.greedy(target.sequence_hidden(tokens))[-1]))
    return tokens[:length]


def differences(target: TinyTarget, outputs: dict[int, list[int]], prompt_lens: dict[int, int]) -> list[str]:
    """Each request whose tokens are not the target's greedy decoding of its prompt: the first position
    that differs, with both tokens."""
    found = []
    for rid, tokens in sorted(outputs.items()):
        want = greedy_decoding(target, tokens[: prompt_lens[rid]], len(tokens))
        if tokens != want:
            at = next(i for i, (g, w) in enumerate(zip(tokens, want)) if g != w)
            found.append(f"request {rid}: token {at} is {tokens[at]}, the target's greedy decoding {want[at]}")
    return found
