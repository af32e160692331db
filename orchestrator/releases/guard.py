"""Lock and audit around a mutating command that is not `up` (down, prune, pin, lock release).

`up` and `rollback` take the same lock as a step of their own (deploy/steps_release.TakeLock), so the
lock is held from before the first read that matters until the release's outcome is written.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import Iterator

from ..config.inventory import Inventory
from ..runner.events import Events
from ..transport.group import Cluster
from . import audit
from .lock import DeployLock


@contextmanager
def holding_lock(cluster: Cluster, inventory: Inventory, events: Events, ttl: float = 900.0) -> Iterator[DeployLock]:
    """Take the deploy lock on the head (LockHeld at once if someone holds a live one); a stale lock is
    taken over with a warning and an audit line. Released on the way out, whatever happens."""
    lock = DeployLock(cluster.head, inventory, audit.command_line(), ttl)
    lock.acquire()
    try:
        if lock.taken_over:
            stale, why = lock.taken_over
            owner = stale.describe() if stale else "unreadable"
            events.warn(f"took over a stale deploy lock ({why}): {owner}", cluster.head.name)
            audit.append(cluster, inventory, audit.entry("lock-takeover", "taken", detail=f"{why}; was held by {owner}"))
        lock.start_refreshing()
        yield lock
    finally:
        lock.release()
