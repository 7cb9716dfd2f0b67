"""vllm-ascend's Model Runner V2 MTP speculator on CPU as an implementation under test (imports it lazily).

The generations it runs: the 0.23.0 release (``AscendEagleSpeculator`` on vLLM 0.23.0) and main
(``AscendMTPSpeculator`` on vLLM 0.27.1), whatever ``tox -e vllm_ascend`` installed; the install,
the fake ``torch_npu`` and the import order are the ``vllm_ascend`` adapter's.

``importing``: the V1 adapter's import order, and main's SciPy import absorbed.
``generation``: what differs between 0.23.0 and main, found by what their modules and classes hold.
``build``: the speculator by vllm-ascend's own ``init_speculator``, from the V1 adapter's tiny config.
``model``: the attention group returning vllm-ascend's ``AscendMetadata``, and the draft model whose
attention reads it as the eager NPU kernels do (host lists).
``adapter``: ``--impl vllm_ascend_mrv2``: steps 1-4 and the whole ``propose`` loop by the speculator's code;
the runner's inputs are the kit's (``sim.impls.kit.mrv2_runner``), shared with ``vllm_mrv2``.
``divergences``: where it differs from the core (vLLM MRV2's, inherited, and vllm-ascend's host lengths).
"""
