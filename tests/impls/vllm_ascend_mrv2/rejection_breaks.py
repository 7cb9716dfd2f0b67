"""vllm-ascend's MRV2 rejection sampler broken, for ``test_rejection_sampler.py``'s catch tests: each applied to the
test (``monkeypatch``) as an edit of the kernel file (``tests.impls.fixes.edited_module``), whose
``rejection_sample`` the sampler's module then hands out.

- ``temperatures_of_the_batch_rows``: the sampling kernel reads each request's temperature at its batch row, not
  its request-state row (``idx_mapping``): in a runner, whose rows are handed out as requests arrive, a greedy
  request samples at another's temperature. Invisible where state row r is batch row r.
"""

from __future__ import annotations

from sim.impls.kit.ascend.importing import import_ascend
from tests.impls.fixes import edited_module

MODULE = "vllm_ascend.worker.v2.spec_decode.rejection_sampler_utils"
# the per-request sampling kernel's temperature load, after its seed's (0.23.0 and main alike)
TEMPERATURE_LOAD = (
    r"(seed = tl\.load\(seed_ptr \+ req_state_idx\)  # noqa: F841\n\s*)temp = tl\.load\(temp_ptr \+ req_state_idx\)"
)


def temperatures_of_the_batch_rows(monkeypatch) -> None:
    module = import_ascend(MODULE)
    edited = edited_module(module, TEMPERATURE_LOAD, r"\1temp = tl.load(temp_ptr + req_idx)")
    monkeypatch.setattr(module, "rejection_sample", edited.rejection_sample)
