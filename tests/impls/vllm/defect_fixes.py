"""vLLM's ``EagleProposer`` with its known defect fixed, as a pull request fixing it would.

``FIXES``: name -> (the known defect, the proposer's method, the fix). ``-p tests.impls.vllm.defect_fixes``
with ``MTP_FIXED_VLLM=NAME`` applies one for the session (in every xdist worker), so the whole gate runs
on it and must end with the one line "fixed: ID no longer present; drop it from the list".

- ``max-query-len-compacted``: ``unpadded-max-query-len`` (``tests.impls.fixes``, shared with
  vllm-ascend's proposers): ``prepare_inputs`` reports the compacted batch's longest query.
"""

from __future__ import annotations

import pytest

from tests.impls.fixes import fix_method, max_query_len_compacted, session_plugin

ENV = "MTP_FIXED_VLLM"
FIXES = {"max-query-len-compacted": ("unpadded-max-query-len", "prepare_inputs", max_query_len_compacted)}


def apply(name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """vLLM's proposer with the fix ``name`` (``FIXES``)."""
    from sim.impls.kit.vllm_eagle import eagle_proposer

    fix_method(FIXES, ENV, "vLLM", name, eagle_proposer(8), monkeypatch)


pytest_configure = session_plugin(ENV, lambda name, monkeypatch: apply(name, monkeypatch))
