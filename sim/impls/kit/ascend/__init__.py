"""The Ascend-on-CPU pieces every vllm-ascend adapter shares (0.23.0 and main's V1 proposer, their MRV2
speculator, 0.13.0's ``MtpProposer``).

- ``checkout``, ``install``, ``vllm_source``: the vllm-ascend under test into ``tox -e vllm_ascend``
  (the released wheels, a checkout, vLLM from a source tree), and the closures it runs on;
- ``importing``: vllm-ascend imported without an NPU (``fake_torch_npu``, ``fake_npu_graphs``: the
  ``torch_npu`` surface it touches, ACL graphs recorded and replayed on the simulator);
- ``world``: where a proposer is built (its device, the tiny ``VllmConfig`` with vllm-ascend's config,
  one rank's parallel state); ``runner_view``: what its proposers read of ``NPUModelRunner``, and
  ``runner_source``: the runner's own methods compiled from the installed source;
- ``interop``: the batch as vllm-ascend's attention metadata.
"""
