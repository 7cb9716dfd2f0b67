"""The adapter kit: what every adapter around another project's proposer shares.

An adapter (``sim.impls.NAME``) keeps only what its upstream generation does differently, and imports
the kit and itself only (import-linter holds it); the rest is here, one module a concern:

- ``eager_adapter``: the proposer face (``MtpProposer``'s constructor, trace, host copy) and the
  propose template (validate, arm the trace, call ``_propose``, count logits, int64 [B, K]);
- ``fresh_start``: every run starts from a newly built proposer's state;
- ``runner_ops``: the ops face of an upstream runner's steps 1-3 (``prepare_call`` with the batch);
- ``steps``: steps 1-3 by the helpers vLLM-derived proposers share (``prepare_next_token_ids_*``,
  ``prepare_inputs*``), each generation's call handed in where its signature differs; ``signatures``:
  how an adapter asks a method which generation it is;
- ``kernel_grid``: the grid vllm-ascend's spec-decode Triton kernel is launched on, one where
  every program laps;
- ``vllm_types``, ``vllm_interop``, ``vllm_eagle``: vLLM's types, the batch as vLLM's inputs, vLLM's
  ``EagleProposer`` built from the tiny config;
- ``vllm_model``, ``metadata_checks``: the tiny model behind vLLM's interface, recording what attention
  is given, and the checks on the metadata an implementation hands its backend;
- ``mrv2_runner``, ``mrv2_loop``: what a Model Runner V2 runner hands its speculator's ``propose``
  (input batch, the sampler's counts, request states, block tables), steps 1-3 by MRV2's prefill
  kernel, a shared speculator's per-call sizes; the MRV2 loop's design differences;
- ``tiny_config``: the tiny DeepSeek-V3 ``VllmConfig`` every vLLM-based proposer is built from,
  and the size checks of a shared proposer;
- ``tables``: the shape of an adapter's divergences module (rules, what it cannot run);
- ``factory``: ``implementation()``, from the availability check and the divergences module;
- ``host_reads``: the reads of host tensors an implementation names for the sync property;
- ``scratch``: scratch folders removed when the process ends;
- ``ascend``: the Ascend-on-CPU pieces every vllm-ascend adapter shares (its own docstring).
"""
