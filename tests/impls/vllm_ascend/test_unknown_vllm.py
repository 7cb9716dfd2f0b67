"""A vLLM the adapter has no closure for, beside an importable vllm-ascend, is refused in the adapter's
existing words even with the main-verified leg's record reader in place (``sim.impls.kit.ascend.vllm_source``)."""

from __future__ import annotations

import sys

from sim.impls.kit.ascend import importing, vllm_source
from sim.impls.kit.ascend.checkout import CLOSURES


def test_an_unknown_vllm_is_refused_by_the_adapter_in_its_existing_words(monkeypatch, tmp_path):
    import vllm

    assert importing.unavailable_reason() is None
    monkeypatch.setattr(vllm_source, "record_path", lambda prefix=sys.prefix: tmp_path / "no-record.json")
    monkeypatch.setattr(vllm, "__version__", "0.28.0")
    assert importing.unavailable_reason() == (
        f"vllm 0.28.0 is installed beside vllm-ascend {importing.installed_version()}; "
        f"the vllm_ascend adapter runs on vLLM {', '.join(sorted(CLOSURES))}"
    )
