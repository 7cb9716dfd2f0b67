"""vllm-ascend's full-graph drafting driven as its runner drives it: capture, dispatch, dummy runs.

``capture_all`` is the drafter's part of ``NPUModelRunner.capture_model``: for each FULL key of the
runner's dispatcher (largest first, as ``get_capture_descs`` orders them), the dummy batch the
runner's ``_dummy_run(uniform_decode=True)`` sets up (``num_reqs`` requests of
``uniform_decode_query_len`` tokens) and the drafter's ``dummy_run`` with that key, under vLLM's
capturing switch; vllm-ascend's ``ACLGraphWrapper`` captures each on its first call. A call's
target batch descriptor (the runner's own ``_determine_batch_execution_and_padding``, ``handoff``)
says whether the batch is a uniform decode (every request ``num_spec_tokens + 1`` tokens); only
those are dispatched to a graph under FULL_DECODE_ONLY.
"""

from __future__ import annotations

import numpy as np
import torch

from sim.impls.kit.ascend.importing import import_ascend
from sim.impls.vllm_ascend import branch_divergences, builders, crashes


def _full_keys(p):
    config = import_ascend("vllm.config")
    return [
        d
        for mode, descs in p.runner.cudagraph_dispatcher.get_capture_descs()
        if mode == config.CUDAGraphMode.FULL
        for d in descs
    ]


def captured_sizes(p) -> list[int]:
    """The token counts the runner captures graphs at (its dispatcher's FULL keys, each captured by
    ``capture_all``), ascending: what a call must be padded to, whatever the wrapper ended up holding."""
    return sorted(desc.num_tokens for desc in _full_keys(p))


def _dummy_batch(p, num_tokens: int, num_reqs: int) -> None:
    """The runner's buffers as its uniform-decode dummy run leaves them: ``num_reqs`` requests of
    ``uniform_decode_query_len`` tokens, each as long as its query (``_dummy_run``'s ``max_query_len``: a
    speculative config never takes the paged-attention workspace length), 0 past them, every slot -1,
    and the attention state ``_dummy_run`` sets for an MTP drafter (``SpecDecoding`` under MLA, else
    ``ChunkedPrefill``), whatever the last call's was."""
    runner = p.runner
    states = import_ascend("vllm_ascend.attention.attention_v1").AscendAttentionState
    runner.attn_state = states.SpecDecoding if runner.vllm_config.model_config.use_mla else states.ChunkedPrefill
    q = runner.uniform_decode_query_len
    qsl = torch.arange(num_reqs + 1, dtype=torch.int32) * q
    runner.query_start_loc.cpu[: num_reqs + 1] = qsl.clamp(max=num_tokens)
    runner.query_start_loc.gpu[: num_reqs + 1] = runner.query_start_loc.cpu[: num_reqs + 1].to(runner.device)
    for lengths in (runner.seq_lens_device, runner.seq_lens_host):
        lengths.zero_()
        lengths[:num_reqs] = q
    runner.input_batch.block_table[0].slot_mapping.gpu.fill_(-1)


def dummy_run(p, num_tokens: int, capturing: bool = False) -> None:
    """The drafter's ``dummy_run`` as the runner's ``_dummy_run(num_tokens, uniform_decode=True)`` issues
    it: requests of ``uniform_decode_query_len`` tokens (the last one shorter), graph mode and padding
    decided by the runner's own ``_determine_batch_execution_and_padding`` (synced with the other DP
    ranks where there are several), the runner's buffers as that dummy batch leaves them (graph
    runners: an eager dummy run reads no metadata)."""
    runner = p.runner
    q = runner.uniform_decode_query_len
    num_reqs = min(runner.max_num_reqs, -(-num_tokens // q))
    lens = np.full(num_reqs, q, dtype=np.int32)
    lens[-1] = num_tokens - q * (num_reqs - 1)
    mode, desc, _, across, _ = runner._determine_batch_execution_and_padding(
        num_tokens=num_tokens,
        num_reqs=num_reqs,
        num_scheduled_tokens_np=lens,
        max_num_scheduled_tokens=q,
        use_cascade_attn=False,
        force_eager=not runner._use_aclgraph(),
        force_uniform_decode=True,
    )
    num_reqs = desc.num_reqs or num_reqs
    if across is not None and desc.num_tokens != num_tokens:
        across[:] = desc.num_tokens  # as _dummy_run pads it
    if runner._use_aclgraph():
        _dummy_batch(p, desc.num_tokens, num_reqs)
    if crashes.sidestepped(branch_divergences.DUMMY_STALE_INDICES.id):
        p.token_indices_to_sample.fill_(0)  # crashes.SIDESTEPS
    monitor = import_ascend("vllm.compilation.monitor")
    monitor.set_cudagraph_capturing_enabled(capturing)
    try:
        with builders.for_a_dummy_batch():
            p.dummy_run(
                num_tokens=desc.num_tokens,
                num_reqs=num_reqs,
                num_tokens_across_dp=across,
                aclgraph_runtime_mode=mode,
                batch_descriptor=desc,
                in_graph_capturing=capturing,
            )
    finally:
        monitor.set_cudagraph_capturing_enabled(False)
    torch.npu.current_stream().synchronize()


def capture_all(p) -> None:
    """Every FULL key's graph, captured by the drafter's dummy run at that key."""
    for desc in _full_keys(p):
        dummy_run(p, desc.num_tokens, capturing=True)


def load_runner(p, batch) -> None:
    """The runner's per-request lengths for this call, as its input preparation leaves them: the
    verified batch's ``seq_lens`` (device) and host copy (``optimistic_seq_lens_cpu``), 0 past it."""
    runner, b = p.runner, batch.num_reqs
    runner.seq_lens_device.zero_()
    runner.seq_lens_device[:b] = batch.seq_lens
    runner.seq_lens_host.zero_()
    runner.seq_lens_host[:b] = torch.as_tensor(batch.seq_lens_cpu)
