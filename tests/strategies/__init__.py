"""Hypothesis strategies, one module per kind of generated input."""
