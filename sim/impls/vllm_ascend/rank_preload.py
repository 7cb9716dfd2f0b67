"""Imported by the fork server of a DP rank pool (``data_parallel.DpPool``): vLLM and vllm-ascend's
drafter loaded once there, so each rank forks with them instead of importing them itself (about 5 s
of CPU per rank)."""

from sim.impls.kit.ascend.importing import import_ascend

import_ascend("vllm_ascend.spec_decode.eagle_proposer")
