"""The MTP proposer core: device-agnostic, no vLLM import.

Input preparation (``next_tokens``, ``prepare``), per-step metadata
(``steps``), the PCP split plan (``pcp``) and the input checks
(``validate``) are plain functions over the typed metadata of ``batch``.
"""
