"""vLLM 0.33.0's ``EagleProposer`` on CPU as an implementation under test (imports vllm lazily).

``adapter``: ``--impl vllm``, steps 1-4 and the whole ``propose`` loop by vLLM's code.
``interop``: the core's metadata <-> vLLM's types.
``eagle``: building the proposer from a tiny local config, no weights, no hub.
``model``: the simulator's ``TinyMtp`` and paged cache, wrapped as vLLM's draft
model, with an attention group that snapshots every step's metadata.
``divergences``: where vLLM differs from the core by design, each pinned by a test.
"""
