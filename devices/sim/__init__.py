"""The CPU reference simulator device: plain torch, strict like an NPU."""

from devices.sim.device import SimDevice

__all__ = ["SimDevice"]
