"""The tiny models the proposer runs with: a DeepSeek-MTP-shaped draft layer and a causal
target (``tiny``), attention over a paged KV cache (``paged_attention``), and a block
allocator that reuses freed blocks (``block_allocator``). No other part of ``sim`` is imported."""
