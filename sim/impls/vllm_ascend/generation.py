"""What differs between the vllm-ascend generations the adapter drives, found by signature, not by version.

The same adapter runs vllm-ascend 0.23.0 (on vLLM 0.23.0), main (on vLLM
0.27.1) and the release branches between, and v0.22.1rc, v0.21.0rc and v0.20.2rc (docs/upstream-ci.md,
"Every branch"); where their proposer's methods
differ, this module asks the method itself what it takes:

- ``attn_update_stack_num_spec_norm``: 0.23.0 takes ``old_attn_metadata`` before the
  common metadata (the eager path reads none of it: None); main dropped it.
- ``_propose``: main takes ``num_speculative_tokens`` (dynamic speculative decoding:
  it sets ``self.num_speculative_tokens`` from it on entry), which main's runner hands it from
  ``SchedulerOutput.num_spec_tokens_to_schedule`` (a field vLLM 0.27 has, 0.23 has not);
  0.23.0 reads the attribute.
- the runner's ``propose_draft_token_ids`` asks ``use_cp`` (0.23.0) or ``use_dcp`` (main):
  both are the runner's own properties, compiled from source (``build.RunnerView``).
- the next step's host lengths under asynchronous scheduling (``correct_host_seq_lens``): corrected
  by the counts copied on the side stream (0.23.0 and main), or copied from the device's (v0.21.0rc,
  v0.22.1rc).
- the SFA builder: main's copies every build's lengths into its own buffers (``name``: which
  divergence table applies, ``branch_divergences.in_force``).
- the draft steps' builds: v0.21.0rc builds each through the builder's ``build(0, cad, model)``, which
  is not told the step, and names the update's index ``draft_step`` (``steps_built_untold``;
  ``build_step``, ``draft_index``); v0.22.1rc on, through ``build_for_drafting(cad, draft_index)``.
- releases/v0.18.0: its base class lives in
  ``eagle_proposer`` (``base_module``), its step 1 takes the target's metadata first
  (``next_token_ids_padded``), its drafter reads the runner's lengths as a host and device pair in FULL
  mode (``runner_lengths_paired``), and its MTP drafter captures each model forward in full graphs
  (``graphs_wrap_the_model``).

What differs at import (vLLM 0.27's ``PIN_MEMORY``, main's ``triton.experimental.gluon``
stand-ins) is absorbed by ``importing.prepare``.
"""

from __future__ import annotations

import dataclasses
import functools
import importlib.util
import inspect
import re

import torch

from sim.impls.kit.ascend import interop, runner_source
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.signatures import takes
from sim.impls.vllm_ascend import builders

# What main's SFA builder does at every build since vllm-ascend #13958, and 0.23.0's does not.
_SFA_LENGTHS_COPIED = "actual_seq_lengths_key[:num_reqs].copy_("


# What v0.20.2rc's reduce sampling does with each rank's top candidates (its torch path scatters them into the
# whole vocabulary), and later branches' does not (they keep the gathered candidates and their ids).
_REDUCE_SAMPLE_INTO_THE_VOCABULARY = "full_logits.scatter_("


# What v0.21.0rc and v0.22.1rc's dummy run builds a capture's metadata from, and 0.23.0's does not (it
# takes the draft's group's, ``block_table[self.kv_cache_gid]``).
_CAPTURE_OF_GROUP_0 = "block_table_tensor=self.runner.input_batch.block_table[0]"


# Where the drafters' base class lives: ``llm_base_proposer`` (v0.20.2rc on), ``eagle_proposer`` (v0.18.0).
_BASE_MODULES = ("vllm_ascend.spec_decode.llm_base_proposer", "vllm_ascend.spec_decode.eagle_proposer")


@functools.cache
def base_module():
    """The checkout's module of the drafters' base class (its draft loop, ``prepare_inputs_padded``'s
    kernel launch, the sampling it drafts with): ``llm_base_proposer`` from v0.20.2rc on; v0.18.0 has
    the class in ``eagle_proposer``."""
    import_ascend("vllm_ascend.spec_decode")
    return import_ascend(next(m for m in _BASE_MODULES if importlib.util.find_spec(m) is not None))


def base_proposer():
    """The checkout's base class of its drafters (``AscendSpecDecodeBaseProposer``; v0.18.0's
    ``SpecDecodeBaseProposer``, itself vLLM 0.18's ``EagleProposer``)."""
    module = base_module()
    return getattr(module, "AscendSpecDecodeBaseProposer", None) or module.SpecDecodeBaseProposer


# What v0.18.0's load_model does with an MTP draft under full graphs, and later generations' do not.
_MTP_MODEL_WRAPPED = "self.model = ACLGraphWrapper("

# What v0.21.0rc's draft steps build their metadata with, and other generations' do not.
_UNTOLD_BUILD = re.compile(r"attn_metadata_builder\.build\(\s*0,")


@functools.cache
def steps_built_untold() -> bool:
    """Whether the drafter builds each draft step's metadata through the builder's ``build(0, cad, model)``,
    which is not told the step (v0.21.0rc), not through ``build_for_drafting(cad, draft_index)`` (v0.18.0,
    and v0.22.1rc on)."""
    return bool(_UNTOLD_BUILD.search(inspect.getsource(base_proposer().attn_update_stack_num_spec_norm)))


def draft_index(arguments) -> int:
    """The draft index of a bound ``attn_update_stack_num_spec_norm`` call's ``arguments``."""
    return arguments["draft_step" if "draft_step" in arguments else "draft_index"]


def build_step(proposer, builder, cad, draft_index: int):
    """Draft step ``draft_index + 1``'s metadata of ``cad``, built by ``builder`` as ``proposer``'s update
    builds it, the recording builder told the step (``builders.building_step``)."""
    with builders.building_step(draft_index + 1):
        if steps_built_untold():
            return builder.build(0, cad, proposer.runner.get_model())
        return builder.build_for_drafting(cad, draft_index)


@functools.cache
def tell_builders_the_step() -> None:
    """Where the draft steps' builds are not told their step (``steps_built_untold``), the proposer's
    ``attn_update_stack_num_spec_norm`` tells the recording builders (``builders.building_step``), so that
    a step's build is recorded, and its checks named, as that step's. Plumbing: nothing it builds changes."""
    if not steps_built_untold():
        return
    cls = base_proposer()
    update = cls.attn_update_stack_num_spec_norm

    @functools.wraps(update)
    def telling(self, draft_step, *args, **kwargs):
        with builders.building_step(draft_step + 1):
            return update(self, draft_step, *args, **kwargs)

    cls.attn_update_stack_num_spec_norm = telling


@functools.cache
def runner_lengths_paired() -> bool:
    """Whether the drafter reads the runner's per-request lengths in FULL mode as a host and device pair
    (v0.18.0's ``runner.seq_lens.gpu`` / ``.cpu``), not as ``seq_lens`` and ``optimistic_seq_lens_cpu``."""
    return "self.runner.seq_lens.gpu" in inspect.getsource(base_proposer()._propose)


@functools.cache  # asked at every call of a full-graph drafter (build.graphed_model)
def graphs_wrap_the_model(method: str) -> bool:
    """Whether the drafter captures ``method``'s draft per model forward (v0.18.0's MTP drafter wraps its
    model in an ``ACLGraphWrapper``), not its whole merged draft (``_run_merged_draft``)."""
    return method == "mtp" and _MTP_MODEL_WRAPPED in inspect.getsource(base_proposer()._maybe_share_lm_head)


@functools.cache
def has_reduce_sample() -> bool:
    """Whether the checkout has reduce sampling (its ``AscendConfig`` reads ``enable_reduce_sample``; v0.18.0's does not)."""
    return "enable_reduce_sample" in inspect.getsource(import_ascend("vllm_ascend.ascend_config").AscendConfig)


@functools.cache
def capture_reads_group_0() -> bool:
    """Whether the drafter's ``dummy_run`` captures its graphs on KV-cache group 0's block table, whatever
    the draft's group (``branch_divergences.CAPTURE_GROUP_0``)."""
    return _CAPTURE_OF_GROUP_0 in inspect.getsource(base_proposer().dummy_run)


@functools.cache
def name() -> str:
    """``0.18.0``, ``0.20.2``, ``0.21.0``, ``0.22.1``, ``0.23.0`` or ``main``: whose divergence table applies
    (``branch_divergences.in_force``), by what the checkout does: v0.18.0 has no ``llm_base_proposer``; v0.20.2rc's reduce sampling scatters each rank's
    candidates into the whole vocabulary (``_REDUCE_SAMPLE_INTO_THE_VOCABULARY``); v0.21.0rc builds its
    draft steps untold (``steps_built_untold``); v0.22.1rc's dummy run captures on group 0's block table
    (``capture_reads_group_0``); main's SFA builder copies every build's key lengths into buffers of its
    own (``_build``), 0.23.0's hands views of the common metadata's."""
    if base_module().__name__.endswith(".eagle_proposer"):
        return "0.18.0"
    sampler = import_ascend("vllm_ascend.sample.sampler")._apply_top_k_top_p_pytorch
    if _REDUCE_SAMPLE_INTO_THE_VOCABULARY in inspect.getsource(sampler):
        return "0.20.2"
    if steps_built_untold():
        return "0.21.0"
    if capture_reads_group_0():
        return "0.22.1"
    builder = import_ascend("vllm_ascend.attention.sfa_v1").AscendSFAMetadataBuilder
    return "main" if _SFA_LENGTHS_COPIED in inspect.getsource(builder._build) else "0.23.0"


def update_step(p, draft_index: int, cad, batch_size: int, positions, mode, attn_group):
    """One ``attn_update_stack_num_spec_norm`` call, eager and unpadded (``input_batch_size == batch_size``)."""
    head = (
        (draft_index, None, cad)
        if takes(p.attn_update_stack_num_spec_norm, "old_attn_metadata")
        else (draft_index, cad)
    )
    return p.attn_update_stack_num_spec_norm(*head, batch_size, batch_size, positions, mode, attn_group=attn_group)


def next_token_ids_padded(p, batch, *args):
    """``p.prepare_next_token_ids_padded(*args)`` for ``batch``: v0.18.0's takes the target's metadata
    first (each discarded request's backup token is read at its host length)."""
    head = (
        (interop.to_ascend_metadata(batch),) if takes(p.prepare_next_token_ids_padded, "common_attn_metadata") else ()
    )
    return p.prepare_next_token_ids_padded(*head, *args)


def scheduled_draft_count(scheduler_output_cls, num_speculative_tokens: int) -> dict:
    """The ``SchedulerOutput`` field by which this generation's scheduler tells the runner the draft
    count (vLLM 0.27's ``num_spec_tokens_to_schedule``; 0.23 has none)."""
    fields = {f.name for f in dataclasses.fields(scheduler_output_cls)}
    return {"num_spec_tokens_to_schedule": num_speculative_tokens} if "num_spec_tokens_to_schedule" in fields else {}


def correct_host_seq_lens(runner, n: int, num_computed, queries) -> None:
    """The next step's host lengths (``optimistic_seq_lens_cpu``, counted ahead as if every draft were
    accepted) corrected, given its ``n`` rows' ``num_computed_tokens`` as corrected on the device and
    their scheduled ``queries``: by the runner's own ``_correct_optimistic_seq_lens_cpu`` (0.23.0 and
    main: the valid counts its side stream copied), or, where the runner has none (v0.21.0rc and
    v0.22.1rc), as their ``_prepare_inputs`` does it: the device's lengths (``seq_lens = num_computed_tokens
    + num_scheduled_tokens``) copied to the host, read after that copy's event. There the host's valid
    counts are read by vLLM's ``_get_valid_sampled_token_count`` (its deferred correction of the
    request states), after their copy's event."""
    if runner_source.defines("_correct_optimistic_seq_lens_cpu"):
        runner._correct_optimistic_seq_lens_cpu(n)
        return
    runner._get_valid_sampled_token_count()
    seq_lens = num_computed + torch.as_tensor(queries, device=num_computed.device)
    runner.optimistic_seq_lens_cpu[:n].copy_(seq_lens.cpu())


@functools.cache
def runner_hands_optimistic_host_lengths() -> bool:
    """Whether the runner's ``_build_attention_metadata`` hands its host lengths as its
    ``optimistic_seq_lens_cpu`` (v0.20.2rc on): one host tensor as ``seq_lens_cpu``, vLLM's
    ``_seq_lens_cpu`` and ``seq_lens_cpu_upper_bound``, and under asynchronous spec decoding no
    ``seq_lens_cpu`` nor ``num_computed_tokens_cpu`` (the device's are authoritative); v0.18.0's hands
    ``seq_lens_cpu`` alone, always."""
    return "_seq_lens_cpu=self.optimistic_seq_lens_cpu" in runner_source.method_source("_build_attention_metadata")


def runner_metadata(batch):
    """The target's ``AscendCommonAttentionMetadata`` of ``batch`` as this generation's runner fills it for a
    synchronous step (its ``_build_attention_metadata``): the kit's, and where the runner hands optimistic
    host lengths (``runner_hands_optimistic_host_lengths``) those as one tensor under ``seq_lens_cpu``,
    vLLM's ``_seq_lens_cpu`` (which the builders read first) and ``seq_lens_cpu_upper_bound``, with no host
    positions (the runner hands them under DSA compression only)."""
    cad = interop.to_ascend_metadata(batch)
    if not runner_hands_optimistic_host_lengths():
        return cad
    lengths = cad.seq_lens_cpu
    return dataclasses.replace(cad, _seq_lens_cpu=lengths, seq_lens_cpu_upper_bound=lengths, positions_cpu=None)


def pad_query_start_loc_for_fia(runner, *args) -> int:
    """The runner's ``_pad_query_start_loc_for_fia`` on its ``query_start_loc`` (0.23.0 on: handed the
    buffer; before: its own)."""
    if takes(runner._pad_query_start_loc_for_fia, "query_start_loc"):
        return runner._pad_query_start_loc_for_fia(runner.query_start_loc, *args)
    return runner._pad_query_start_loc_for_fia(*args)
