"""An adapter's ``implementation()`` factory: availability first, then the ``Implementation`` of its pieces.

Every adapter's entry point (``sim.impls.BUILTIN``) does the same: ask why the upstream project
cannot run here (``ImplementationUnavailable`` naming the cause), else build the ``Implementation``
from its ops, its proposer class and its divergences module (``DIVERGENCES``, ``RULES``,
``LACKS``, ``sim.impls.kit.tables``; and ``HOST_READS`` where its code reads host tensors,
``sim.impls.kit.host_reads``).
"""

from __future__ import annotations

from sim.impls import Implementation, ImplementationUnavailable


def implementation(
    name: str, unavailable_reason, ops, proposer_cls: type, divergences, describe=None
) -> Implementation:
    """The implementation ``name``; ``unavailable_reason()`` names why it cannot run here (raised as
    ``ImplementationUnavailable``). ``describe``: a callable for the report header, run only when available."""
    reason = unavailable_reason()
    if reason:
        raise ImplementationUnavailable(name, reason)
    return Implementation(
        name,
        ops,
        proposer_cls,
        dict(divergences.LACKS),
        divergences.RULES,
        tuple(divergences.DIVERGENCES.values()),
        describe=describe() if describe else "",
        host_reads=getattr(divergences, "HOST_READS", ()),
    )
