"""A stale deploy lock taken over: the warning and the audit line, said the same way by the Operation
(operation/operation.py, every mutating command but `up`) and by `up`'s lock step (deploy/steps_release.py)."""

from __future__ import annotations

from ..config.inventory import Inventory
from ..runner.events import Events
from ..transport.group import Cluster
from . import audit
from .lock import DeployLock, LockDetails


def report_takeover(cluster: Cluster, inventory: Inventory, events: Events, lock: DeployLock) -> LockDetails | None:
    """A stale lock we took over: a warning and an audit line; returns what the dead holder wrote."""
    if not lock.taken_over:
        return None
    stale, why = lock.taken_over
    owner = stale.describe() if stale else "unreadable"
    events.warn(f"took over a stale deploy lock ({why}): {owner}", cluster.head.name)
    audit.append(cluster, inventory, audit.entry("lock-takeover", "taken", detail=f"{why}; was held by {owner}",
                                                 release=stale.release if stale else None))
    return stale
