"""vllm-ascend 0.13.0's ``MtpProposer`` on CPU as an implementation under test (imports it lazily).

The released proposer nearest the 0.13-era proposer (docs/DESIGN.md). It reuses ``sim.impls.vllm_ascend``'s
fake ``torch_npu``, import order, config and interop; what differs in 0.13 is here:

``importing``: the pinned versions and why this release cannot be tested here.
``build``: ``MtpProposer`` on the shared tiny config, and the runner attributes 0.13 reads.
``mla_metadata``: the Ascend MLA attention metadata ``_propose`` edits in place, built as
0.13.0's ``AscendMLAMetadataBuilder.build`` builds it (eager, one rank).
``model``: the tiny MTP model reading that metadata as the MLA kernels do; a metadata recorder.
``adapter``: ``--impl vllm_ascend_0_13``: steps 1-4 and the whole ``_propose`` loop by 0.13.0's code.
``divergences``: where 0.13.0 differs from the core, each pinned by a test; the reference's rules.
"""
