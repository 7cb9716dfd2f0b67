"""pytest's entry to the gate: the plugin is tests/plugin.py (options, profiles, marks, fixtures, the report)."""

import os

os.environ.setdefault("TORCH_DEVICE_BACKEND_AUTOLOAD", "0")  # before torch: see devices/accelerator.py

pytest_plugins = ["tests.plugin", "pytester"]  # pytester: tests/harness/test_gate_config.py runs a throwaway test
