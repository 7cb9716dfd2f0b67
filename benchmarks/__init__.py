"""Benchmarks: scripts that print figures, run as ``python -m benchmarks.NAME``."""
