"""A decode node's KV connector, its scheduler side: every request's prompt KV comes from a prefill node.

On the decode node of a prefill/decode split (``Scenario.decode_node``) vLLM's scheduler asks its KV connector
how many of a new request's tokens another node computed (``get_num_new_matched_tokens``): here, all of its
prompt, loaded asynchronously. vLLM then allocates the request's blocks, tells the connector which
(``update_state_after_alloc``) and holds the request (``WAITING_FOR_REMOTE_KVS``) until a step's output
reports the load done (``KVConnectorOutput.finished_recving``); then it computes the last prompt token again,
to sample the first output token. What a real connector moves between nodes is the serving loop's to write
(``sim.serving.simulator.transfer_prompt_kv``, as a prefill node's correct proposer wrote it): this class
only says which requests load into which blocks (``pending``). Its worker side is never built.
"""

from __future__ import annotations

from sim.impls.kit.vllm_schedule import _import

_base = _import("vllm.distributed.kv_transfer.kv_connector.v1.base")


class RemotePrefill(_base.KVConnectorBase_V1):
    """Every new request's prompt, computed on a prefill node, loaded into the blocks vLLM allocates."""

    def __init__(self, vllm_config, role, kv_cache_config):
        super().__init__(vllm_config, role, kv_cache_config)
        self.pending: dict[str, list[int]] = {}  # request -> the blocks its prompt's KV is loaded into
        self.loaded: set[str] = set()  # requests whose prompt was loaded: a preempted one recomputes it here

    def get_num_new_matched_tokens(self, request, num_computed_tokens: int):
        if request.request_id in self.loaded:
            return 0, False
        return len(request.prompt_token_ids) - num_computed_tokens, True

    def update_state_after_alloc(self, request, blocks, num_external_tokens: int) -> None:
        if num_external_tokens:
            self.pending[request.request_id] = list(blocks.get_block_ids()[0])
            self.loaded.add(request.request_id)

    def build_connector_meta(self, scheduler_output):
        return _base.KVConnectorMetadata()

    # the worker side: a decode node's runner loading the KV, which the serving loop stands in for
    def start_load_kv(self, forward_context, **kwargs) -> None:
        raise NotImplementedError("RemotePrefill is a scheduler's connector")

    def wait_for_layer_load(self, layer_name: str) -> None:
        raise NotImplementedError("RemotePrefill is a scheduler's connector")

    def save_kv_layer(self, layer_name, kv_layer, attn_metadata, **kwargs) -> None:
        raise NotImplementedError("RemotePrefill is a scheduler's connector")

    def wait_for_save(self) -> None:
        raise NotImplementedError("RemotePrefill is a scheduler's connector")
