"""vllm-ascend's ``AscendEagleProposer`` on CPU as an implementation under test (imports it lazily).

The generations it runs: the 0.23.0 release (vLLM 0.23.0) and main (vLLM 0.27.1), whatever
``tox -e vllm_ascend`` installed (``checkout``: the wheels, or a checkout at ``VLLM_ASCEND_SRC``).

``checkout``: installs vLLM and vllm-ascend into the env; the vLLM versions it has closures for.
``vllm_source``: the main-verified leg: vLLM from a source checkout at the commit the vllm-ascend
checkout's ``.github/vllm-main-verified.commit`` names, on its release's closure, and its record.

``importing``: the import order and CPU stand-ins that let vllm-ascend import without an NPU.
``fake_torch_npu``: the ``torch_npu`` stand-in, installed only when the real one does not import.
``build``: the proposer from a tiny local config and a plain runner, no weights, no hub.
``interop``: the core's metadata as vllm-ascend's types.
``model``: the tiny MTP model and a recording attention group behind vllm-ascend's interfaces.
``builders``, ``attn_setup``: the checkout's own metadata builders, recording, set up as its runner sets
them up; ``mla``, ``sfa``: what the MLA and SFA kernels read of their builders' metadata.
``generation``: what differs between generations, found by the methods' signatures.
``adapter``: ``--impl vllm_ascend``: steps 1-4 and the whole ``_propose`` loop by vllm-ascend's code.
``divergences``: where vllm-ascend differs from the core by design, each pinned by a test.
"""
