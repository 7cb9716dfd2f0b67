"""The divergences a case on DP or TP ranks accepts: a session's ``--divergences`` list carried into its
ranks, so that each rank holds to the spec what the session holds to it (a defect fixed and dropped from
the list included), and a replay file reproduces the session's rules without the list beside it."""

from __future__ import annotations

import dataclasses


def accepted_by(case, ids: tuple[str, ...] | None):
    """``case`` (a ``DpCase`` or ``TpCase``) accepting the divergences ``ids`` (a pool's: its session's),
    where it names none of its own; None: every divergence of the implementation."""
    return case if case.divergences is not None or ids is None else dataclasses.replace(case, divergences=tuple(ids))


def divergence_ids(data: dict) -> tuple[str, ...] | None:
    """A replay file's ``divergences`` (absent: None, every divergence accepted); ``ValueError`` names the field."""
    ids = data.get("divergences")
    if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)):
        raise ValueError(f"divergences={ids!r}: expected a list of the divergence ids the ranks accept")
    return None if ids is None else tuple(ids)


def saved(ids: tuple[str, ...] | None) -> dict:
    """What a replay file holds of ``ids`` (nothing where every divergence is accepted)."""
    return {} if ids is None else {"divergences": list(ids)}


def implementation_accepting(ids: tuple[str, ...] | None):
    """The ``vllm_ascend`` implementation with only the divergences ``ids`` accepted, the rest held to the
    spec (None: all of them); ``ValueError`` names an id that is none of its divergences."""
    from sim.impls.vllm_ascend.adapter import implementation

    impl = implementation()
    if ids is None:
        return impl
    kept, unknown = impl.accepting(ids)
    if unknown:
        raise ValueError(f"divergences={list(ids)!r}: {unknown[0]!r} is no divergence of {impl.name}")
    return kept
