"""The adapter kit: what every adapter around another project's proposer shares.

An adapter (``sim.impls.NAME``) keeps only what its upstream generation does differently; the
rest is here, one module a concern:

- ``sim.impls.eager_adapter``: the proposer face (``MtpProposer``'s constructor, trace, host copy)
  and the propose template (validate, arm the trace, call ``_propose``, count logits, int64 [B, K]);
- ``runner_ops``: the ops face of an upstream runner's steps 1-3 (``prepare_call`` with the batch);
- ``steps``: steps 1-3 by the helpers vLLM-derived proposers share (``prepare_next_token_ids_*``,
  ``prepare_inputs*``), each generation's call handed in where its signature differs;
- ``kernel_grid``: the grid vllm-ascend's spec-decode Triton kernel is launched on, one where
  every program laps;
- ``mrv2_runner``: what a Model Runner V2 runner hands its speculator's ``propose`` (input batch, the
  sampler's counts, request states, block tables), steps 1-3 by MRV2's prefill kernel, a shared
  speculator's per-call sizes (vLLM 0.33's and vllm-ascend's MRV2 speculators);
- ``tiny_config``: the tiny DeepSeek-V3 ``VllmConfig`` every vLLM-based proposer is built from,
  and the size checks of a shared proposer;
- ``tables``: the shape of an adapter's divergences module (rules, gate skips);
- ``factory``: ``implementation()``, from the availability check and the divergences module;
- ``sim.impls.host_reads``: the reads of host tensors an implementation names for the sync property;
- ``sim.impls.fresh_start``: every run starts from a newly built proposer's state.
"""
