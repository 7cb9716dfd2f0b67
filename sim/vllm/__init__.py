"""vLLM 0.33.0's ``EagleProposer`` on CPU, driven by the simulator (imports vllm lazily).

``eagle``: building the proposer from a tiny local config, no weights, no hub.
``model``: the simulator's ``TinyMtp`` and paged cache, wrapped as vLLM's draft
model, with an attention group that snapshots every step's metadata.
"""
