"""KV-cache blocks handed out and taken back, in shuffled order.

Finished requests return their blocks and new requests reuse them, so block
tables are non-contiguous and a slot computed as "previous slot + 1" lands in
someone else's block. Block 0 is never handed out: as in vLLM's ``BlockPool``,
it is the null block, nobody's KV (a zero-filled slot buffer or block-table row
points there).
"""

from __future__ import annotations

import numpy as np


class OutOfBlocks(RuntimeError):
    pass


NULL_BLOCK = 0


class BlockAllocator:
    def __init__(self, num_blocks: int, seed: int):
        self.num_blocks = num_blocks
        self.free = (NULL_BLOCK + 1 + np.random.default_rng(seed).permutation(num_blocks - 1)).tolist()

    def allocate(self, n: int) -> list[int]:
        if n > len(self.free):
            raise OutOfBlocks(f"asked for {n} blocks, {len(self.free)} free of {self.num_blocks}")
        taken, self.free = self.free[:n], self.free[n:]
        return taken

    def release(self, blocks: list[int]) -> None:
        self.free.extend(blocks)
