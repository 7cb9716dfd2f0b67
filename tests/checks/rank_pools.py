"""Rank pools for a test module: started on first use per size, closed at the module's end.

Collective timeouts are generous (20 s) so that a busy 2-core machine, with
another worker's ranks beside these, never times out a healthy gloo peer.
"""

from __future__ import annotations

import pytest


def module_pools(device, pool_cls):
    """Yield ``get(size)``: the module's pool of ``size`` ranks (a skip where the device hosts fewer)."""
    started = {}

    def get(size: int):
        if size > device.max_ranks:
            pytest.skip(f"device {device.name} hosts {device.max_ranks} ranks, not {size}")
        if size not in started:
            started[size] = pool_cls(size, device.name, case_timeout_s=120, collective_timeout_s=20)
        return started[size]

    yield get
    for pool in started.values():
        pool.close()
