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
from . import audit, store
from .lock import DeployLock, LockDetails


@contextmanager
def holding_lock(cluster: Cluster, inventory: Inventory, events: Events, ttl: float = 900.0) -> Iterator[DeployLock]:
    """Take the deploy lock on the head (LockHeld at once if someone holds a live one); a stale lock is
    taken over with a warning and an audit line. Released on the way out, whatever happens."""
    lock = DeployLock(cluster.head, inventory, audit.command_line(), ttl)
    lock.acquire()
    try:
        report_takeover(cluster, inventory, events, lock)
        lock.start_refreshing()
        _repair(cluster, inventory, events)
        yield lock
    finally:
        lock.release()


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


def _repair(cluster: Cluster, inventory: Inventory, events: Events) -> None:
    """Under the lock, give a node whose history copy is missing or older the newest copies back."""
    try:
        history = store.read_history(cluster, inventory, [c for c in cluster.nodes if c.is_open])
        for line in store.repair(cluster, inventory, history):
            events.note(line)
    except Exception as exc:  # noqa: BLE001 - the command itself goes on; the copy stays behind, named
        events.warn(f"could not repair the release history: {exc}")
