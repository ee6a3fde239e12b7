"""Cluster kinds: one module each behind one interface (tfcluster/kinds/base.py), routed here and nowhere else.

A command asks ``get(settings.cluster)`` and calls the kind; no other module tests a kind's name. A new kind is a
module with a :class:`~tfcluster.kinds.base.Kind` subclass and a row in ``KINDS``.
"""

from __future__ import annotations

from tfcluster.kinds.aws import Aws
from tfcluster.kinds.base import JobRequest, Kind, KindError, Target, Traits
from tfcluster.kinds.local import Local
from tfcluster.kinds.onprem import OnPrem
from tfcluster.kinds.slurm import SlurmKind

KINDS: dict[str, Kind] = {kind.name: kind for kind in (Local(), Aws(), OnPrem(), SlurmKind())}  # the routing table
NAMES: tuple[str, ...] = tuple(KINDS)

__all__ = ["KINDS", "NAMES", "JobRequest", "Kind", "KindError", "Target", "Traits", "get"]


def get(name: str) -> Kind:
    """The kind named ``name``; KindError naming the kinds there are."""
    try:
        return KINDS[name]
    except KeyError:
        raise KindError(f"CLUSTER={name} is not a cluster kind. Fix: CLUSTER= one of {', '.join(NAMES)}") from None
