"""pytest's entry to the gate: the plugin is tests/plugin.py (options, profiles, marks, fixtures, the report)."""

import os

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # before torch: see devices/accelerator.py

# tests.impls.changed_first: a vllm-ascend pull request's changes first (VLLM_ASCEND_BASE); pytester:
# tests/harness/test_gate_config.py runs throwaway sessions.
pytest_plugins = ["tests.plugin", "tests.impls.changed_first", "pytester"]
