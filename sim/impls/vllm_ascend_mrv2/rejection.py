"""vllm-ascend's MRV2 rejection sampler (``worker/v2/spec_decode/rejection_sampler_utils.py:
rejection_sample``, which vllm-ascend's ``patch_v2/patch_triton.py`` installs as vLLM's MRV2
``rejection_sample``) on a verification batch (``sim.oracle.rejection.Verification``), handed the
inputs MRV2's ``RejectionSampler.__call__`` hands it; its Triton kernels (vllm-ascend's and the
vLLM ones it reuses) interpreted, every launch guarded (``kit.kernel_bounds``).

MRV2 samples the bonus token itself, from the target's logits at the position past the drafts: each
request gets one more logits row, whose logit at ``v.bonus[r]`` is ``BONUS_LOGIT`` above the rest
(for a greedy request its argmax; for a random one a draw that is ``v.bonus[r]`` but for odds of
about 1e-12), so the reference's rows stand as they are. ``draft_sampled`` per request is the token
it continues from (0 here; never read as a draft) and then its drafts; each request has a seed of
its own (MRV2's Gumbel draws are per request and position). What MRV2 keeps per request state (its
temperature, seed and draft logits) sits in the request's state row (``mrv2_runner.state_rows``), not
at its batch row, as in a runner.
"""

from __future__ import annotations

import torch

from sim.impls.kit import rejection as kit
from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.kit.mrv2_runner import state_rows
from sim.impls.vllm_ascend_mrv2 import importing
from sim.oracle.rejection import PLACEHOLDER, Verification

MODULE = "vllm_ascend.worker.v2.spec_decode.rejection_sampler_utils"
BONUS_LOGIT = 30.0


def _inputs(v: Verification, device: torch.device, seed: int) -> dict:
    vocab = v.target_logits.shape[1]
    rows, sampled, pos, owner, local = [], [], [], [], []
    start = 0
    for r, drafts in enumerate(v.drafts):
        k = len(drafts)
        bonus = torch.zeros(vocab)
        bonus[v.bonus[r]] = BONUS_LOGIT
        rows += [v.target_logits[start : start + k], bonus[None]]
        start += k
        sampled += [0, *drafts]
        pos += [100 * r + i for i in range(k + 1)]
        owner += [r] * (k + 1)
        local += list(range(k + 1))
    counts = torch.tensor([len(d) + 1 for d in v.drafts])
    state = state_rows(v.num_reqs)
    draft_logits = None
    if v.draft_probs is not None:  # [num_reqs, max_spec_len, V] by request state: log p of each request's drafts
        draft_logits = torch.zeros(v.num_reqs, v.max_spec_len, vocab)
        for r, rows_r in enumerate(v.per_request(list(v.draft_probs.log()))):
            for i, row in enumerate(rows_r):
                draft_logits[state[r], i] = row
    gen = torch.Generator().manual_seed(seed)
    seeds, temperature = torch.empty(v.num_reqs, dtype=torch.int64), torch.empty(v.num_reqs, dtype=torch.float32)
    seeds[state] = torch.randint(0, 2**31 - 1, (v.num_reqs,), generator=gen)
    temperature[state] = torch.tensor(v.temperature, dtype=torch.float32)
    on = {"device": device}
    return {
        "target_logits": torch.cat(rows).to(torch.float32).to(device).contiguous(),
        "draft_logits": None if draft_logits is None else draft_logits.to(device).contiguous(),
        "draft_sampled": torch.tensor(sampled, dtype=torch.int64, **on),
        "cu_num_logits": torch.cat([torch.zeros(1, dtype=torch.int64), counts.cumsum(0)]).to(torch.int32).to(device),
        "pos": torch.tensor(pos, dtype=torch.int64, **on),
        "idx_mapping": state.to(torch.int32).to(device),
        "expanded_idx_mapping": state[owner].to(torch.int32).to(device),
        "expanded_local_pos": torch.tensor(local, dtype=torch.int32, **on),
        "temperature": temperature.to(device),
        "seed": seeds.to(device),
        "num_speculative_steps": v.max_spec_len,
    }


def sample(v: Verification, device: torch.device, seed: int = 0) -> kit.Sampled:
    """The checkout's output rows for ``v``: each request's ``num_sampled`` ids, then placeholders."""
    importing.prepare()
    rejection_sample = import_ascend(MODULE).rejection_sample
    sampled, num_sampled = rejection_sample(**_inputs(v, device, seed))
    rows = []
    for r, n in enumerate(num_sampled.tolist()):
        ids = sampled[r, :n].tolist()
        rows.append(ids + [PLACEHOLDER] * (v.max_spec_len + 1 - len(ids)))
    return kit.Sampled(rows, set(), False)
