"""Broken per-step updates of vllm-ascend's metadata, for ``test_gate_catches_metadata``.

Each wraps a method of vllm-ascend's proposer (``attn_update_stack_num_spec_norm``:
v0.21.0rc's signature, 0.23.0's or main's, the arguments bound by name; ``functools.wraps`` keeps
the signature ``sim.impls.vllm_ascend.generation`` reads):

- ``host_mirror_not_advanced(field)``: the update leaves the host mirror ``field``
  as the step before had it (the step's attention is built on it), while its
  device tensor advances: bug class 1, vllm-ascend #3300.
- ``computed_as_seq_lens``: ``prepare_inputs_padded`` hands the first pass
  ``num_computed_tokens_cpu`` equal to ``seq_lens_cpu`` (the query counted as computed).
- ``computed_not_advanced``: the update leaves ``num_computed_tokens_cpu`` where the
  step before had it (a drift other than the modelled ``num-computed-tokens-drift``).
- ``written_into_the_step_before(field)``: the update writes step j+1's ``field``
  into the tensor step j's attention holds, as one buffer shared by every step
  would (cross-step aliasing, vllm-ascend #7549); every step's metadata is built
  before the first forward, so step j's forward reads step j+1's values.
- ``attn_state_of_the_first_pass``: the update builds steps 2..K with the first pass's ``attn_state``
  (a drafter that no longer sets ``SpecDecoding`` there): after a batch of new prompts
  (``PrefillNoCache``) each step reads no cached context, its one row attending to itself alone
  (the class of vllm-ascend #8029: a state that contradicts the batch it labels).
- ``other_methods_steps_as_new_prompts``: the update labels steps 2..K of a drafter of another method
  than mtp ``PrefillNoCache`` (vllm-ascend's ``SpecDecoding if mtp else ChunkedPrefill`` choice taken for
  a prefill's): an EAGLE drafter's step reads no cached context; an MTP drafter's is untouched, so only
  a run of another method sees it.
- ``lists_shared_across_steps``: the attention builder (``AscendAttentionMetadataBuilder.build``) hands
  every build the same ``seq_lens_list`` object, rewritten in place, as the SFA builder did with its
  graph-stable length buffers before vllm-ascend #14236: earlier steps' metadata read the last step's.
- ``step_slots_of_a_32k_table``: the update looks a step's block up among the first 256 columns of its
  block-table row (a table as wide as a 32k-token context in blocks of 128): a draft past 32768 tokens
  writes its KV into the row's block 255 (the class of vllm-ascend #10495: acceptance lost at long context).
"""

from __future__ import annotations

import functools
import inspect

from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.vllm_ascend import generation
from tests.impls.fixes import edited


def _old_metadata(original, self, args, kwargs):
    bound = inspect.signature(original).bind(self, *args, **kwargs)
    return bound.arguments["old_common_metadata"], bound.arguments["batch_size"]


class _BuiltOnStaleMirror:
    """An attention group whose builder first puts ``stale`` back as the metadata's ``field``."""

    def __init__(self, group, field: str, stale):
        self.group, self.field, self.stale = group, field, stale

    def get_metadata_builder(self):
        return self

    def _stale(self, common_attn_metadata):
        setattr(common_attn_metadata, self.field, getattr(self.stale, "clone", lambda: self.stale)())
        return common_attn_metadata

    def build_for_drafting(self, common_attn_metadata, draft_index, **kwargs):
        cad = self._stale(common_attn_metadata)
        return self.group.get_metadata_builder().build_for_drafting(cad, draft_index, **kwargs)

    def build(self, common_prefix_len, common_attn_metadata, *args, **kwargs):  # v0.21.0rc's draft steps
        cad = self._stale(common_attn_metadata)
        return self.group.get_metadata_builder().build(common_prefix_len, cad, *args, **kwargs)


def host_mirror_not_advanced(field: str):
    """The update building on ``field`` as the step before left it; ``breaking.applied``: how often the
    metadata it was handed carried the field (never, where the checkout's has no such mirror)."""

    def breaking(original):
        @functools.wraps(original)
        def broken(self, *args, **kwargs):
            old, _ = _old_metadata(original, self, args, kwargs)
            stale = vars(old).get(field)
            if stale is not None:
                breaking.applied += 1
                kwargs["attn_group"] = _BuiltOnStaleMirror(kwargs["attn_group"], field, stale)
            return original(self, *args, **kwargs)

        return broken

    breaking.applied = 0
    return breaking


def attn_state_of_the_first_pass(original):
    return host_mirror_not_advanced("attn_state")(original)


def other_methods_steps_as_new_prompts(original):
    @functools.wraps(original)
    def broken(self, *args, **kwargs):
        if self.method != "mtp":
            states = import_ascend("vllm_ascend.attention.attention_v1").AscendAttentionState
            kwargs["attn_group"] = _BuiltOnStaleMirror(kwargs["attn_group"], "attn_state", states.PrefillNoCache)
        return original(self, *args, **kwargs)

    return broken


def computed_as_seq_lens(original):
    @functools.wraps(original)
    def broken(self, *args, **kwargs):
        cad, *rest = original(self, *args, **kwargs)
        cad.num_computed_tokens_cpu = cad.seq_lens_cpu.clone()
        return (cad, *rest)

    return broken


def computed_not_advanced(original):
    @functools.wraps(original)
    def broken(self, *args, **kwargs):
        bound = inspect.signature(original).bind(self, *args, **kwargs)
        cad, _ = original(self, *args, **kwargs)
        cad.num_computed_tokens_cpu = cad.num_computed_tokens_cpu - 1
        builder = bound.arguments["attn_group"].get_metadata_builder()  # the step's attention built on it
        return cad, generation.build_step(self, builder, cad, generation.draft_index(bound.arguments))

    return broken


def written_into_the_step_before(field: str):
    def breaking(original):
        @functools.wraps(original)
        def broken(self, *args, **kwargs):
            old, batch_size = _old_metadata(original, self, args, kwargs)
            cad, attn_metadata = original(self, *args, **kwargs)
            held, new = getattr(old, field), getattr(cad, field)
            if held is not None and new is not None:
                held[:batch_size].copy_(new[:batch_size])
            return cad, attn_metadata

        return broken

    return breaking


def lists_shared_across_steps(build):
    """``build`` whose metadata's ``seq_lens_list`` is one list per builder, rewritten by every build."""

    @functools.wraps(build)
    def wrapper(self, *args, **kwargs):
        meta = build(self, *args, **kwargs)
        shared = self.__dict__.setdefault("_shared_seq_lens_list", [])
        shared[:] = meta.seq_lens_list
        meta.seq_lens_list = shared
        return meta

    return wrapper


def step_slots_of_a_32k_table(original):
    """``attn_update_stack_num_spec_norm`` whose step slots come from the row's first 256 blocks only."""
    return edited(original, ("index=block_numbers.view(-1, 1)", "index=block_numbers.clamp(max=255).view(-1, 1)"))
