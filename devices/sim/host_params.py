"""``mtp_sim::host_param``: a host-side list turned into a device tensor, as an op.

Being an op, it is recorded by a graph capture like any kernel, with the
list as a plain argument: frozen at capture, as NPU host-side operator
parameters are, until the graph's ``update_params`` rewrites it.
"""

from __future__ import annotations

import torch

_lib = torch.library.Library("mtp_sim", "DEF")
_lib.define("host_param(str name, int[] values) -> Tensor")


def _host_param(name: str, values: list[int]) -> torch.Tensor:
    with torch._C.DisableTorchFunction():  # the op itself is the sanctioned host->device path
        return torch.tensor(values, dtype=torch.int64)


_lib.impl("host_param", _host_param, "CompositeExplicitAutograd")

host_param_op = torch.ops.mtp_sim.host_param.default
