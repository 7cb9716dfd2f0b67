"""vLLM 0.33.0's Model Runner V2 MTP speculator on CPU as an implementation under test (imports vllm lazily).

``adapter``: ``--impl vllm_mrv2``, steps 1-4 by MRV2's Triton kernels (interpreted) and the whole
``MTPSpeculator.propose`` loop.
``build``: the speculator and the runner's block tables, built on CPU from the tiny config of
``sim.impls.kit.vllm_eagle``.
``runner``: what MRV2's model runner hands ``propose`` (its input batch, the sampler's counts, the
request states), made from the core's ``VerifiedBatch`` and ``SampledTokens``.
``model``: the attention group that records what each draft step's attention saw (the draft model
itself is ``sim.impls.kit.vllm_model.VllmTinyMtp``).
``divergences``: where MRV2 differs from the core, each pinned by a test of tests/impls/vllm_mrv2.
"""
