"""Rank pools of one test worker: started on first use per kind and size, closed at the session's end.

Session-scoped, so the properties and the meta-tests of one ``xdist_group`` share the pools of
their worker instead of starting their own. Collective timeouts are generous (20 s) so that a busy
2-core machine, with another worker's ranks beside these, never times out a healthy gloo peer.
"""

from __future__ import annotations

import pytest


def worker_pools(device):
    """Yield ``get(pool_cls, size)``: this worker's pool (a skip where the device hosts fewer ranks)."""
    started = {}

    def get(pool_cls, size: int):
        if size > device.max_ranks:
            pytest.skip(f"device {device.name} hosts {device.max_ranks} ranks, not {size}")
        if (pool_cls, size) not in started:
            started[pool_cls, size] = pool_cls(size, device.name, case_timeout_s=120, collective_timeout_s=20)
        return started[pool_cls, size]

    yield get
    for pool in started.values():
        pool.close()
