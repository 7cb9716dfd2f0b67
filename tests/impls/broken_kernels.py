"""vllm-ascend's spec-decode Triton kernel broken past its first lap, for the adapters' gate-catch tests.

``FirstLapOnly`` launches the real ``prepare_inputs_padded_kernel`` on the real grid but
hands it a request count cut to what one lap of that grid covers, so each program computes
its first tile and stops: the kernel without its grid-stride loop. The rows past the first
lap keep ``STALE``, what a reused buffer may hold: a valid row index, so the error is
silent, as on an NPU. It is caught only where a launch has more tiles than programs.
"""

from __future__ import annotations

STALE = 0


class FirstLapOnly:
    """Stands in for ``prepare_inputs_padded_kernel`` (indexed by its grid, then called)."""

    def __init__(self, kernel):
        self.kernel = kernel
        self.laps_cut = 0  # launches that lost rows: the break did something

    def __getitem__(self, grid):
        def launch(cu_num_draft_tokens, valid_counts, query_start_loc, *outputs_and_count, BLOCK_SIZE, **kwargs):
            *outputs, num_reqs = outputs_and_count
            for out in outputs:
                out.fill_(STALE)
            first_lap = min(int(num_reqs), grid[0] * BLOCK_SIZE)
            self.laps_cut += first_lap < int(num_reqs)
            args = (cu_num_draft_tokens, valid_counts, query_start_loc, *outputs, first_lap)
            return self.kernel[grid](*args, BLOCK_SIZE=BLOCK_SIZE, **kwargs)

        return launch
