"""Our boot unit as the supervisor of the release that serves now, not only at the next boot.

`boot enable` starts the unit: its `docker start --attach` of a running container attaches to it, so from then
on systemd restarts a rank that exits (a head whose peer vanished, after the collective timeout; a peer whose
head vanished) within the unit's start limit. Letting go (`boot disable`, or enable's undo) must not stop what
serves: the unit's own process is killed with SIGKILL (the container is not in the unit's cgroup, and a
killed process forwards nothing to it; the unit does not restart on SIGKILL and, its process having failed,
does not run ExecStop), then its failed state is cleared.
"""

from __future__ import annotations

import time

from ..render.unit import BootUnit
from ..transport.node import NodeConnection, NodeError
from . import privilege
from .boot_undo import Journal

RUNNING_STATES = ("active", "activating", "deactivating", "reloading")
LET_GO_SECONDS = 10.0  # systemd notices a SIGKILLed child at once; this bounds a node that does not answer


def active_state(conn: NodeConnection, name: str) -> str:
    """systemd's ActiveState of the unit (active, activating, failed, inactive, ...)."""
    return conn.run(["systemctl", "show", "-p", "ActiveState", "--value", name], timeout=30,
                    check=True).stdout.strip()


def start(conn: NodeConnection, unit: BootUnit, root: privilege.Root, journal: Journal) -> bool:
    """Start the unit (it attaches to the running container); written down with its undo, letting go.
    False when it was running already (the same unit name and container: nothing to do)."""
    if active_state(conn, unit.name) in RUNNING_STATES:
        return False
    conn.run(root.argv(["systemctl", "start", unit.name]), timeout=120, check=True)
    journal.done(conn.name, f"unit {unit.name} started (it watches {unit.container})",
                 f"unit {unit.name} let go of {unit.container}, which keeps running",
                 lambda: let_go(conn, unit.name, root))
    return True


def let_go(conn: NodeConnection, name: str, root: privilege.Root, timeout: float = LET_GO_SECONDS) -> None:
    """The unit stops watching its container without stopping it (see the module doc)."""
    if active_state(conn, name) in RUNNING_STATES:
        conn.run(root.argv(["systemctl", "kill", "--signal=SIGKILL", name]), timeout=30, check=True)
        deadline = time.monotonic() + timeout
        while (state := active_state(conn, name)) in RUNNING_STATES:
            if time.monotonic() >= deadline:
                raise NodeError(conn.name, f"{name} is still {state} {timeout:.0f} s after its process was killed")
            time.sleep(0.2)
    conn.run(root.argv(["systemctl", "reset-failed", name]), timeout=30)


def watch_again(conn: NodeConnection, name: str, root: privilege.Root) -> bool:
    """After a command stopped and started the container itself (`restart`, `bench --replicates`): the unit's
    `docker start --attach` ended with the container's stop, so the unit is inactive; started again, it
    attaches to the running container and watches it as before. False when it was running already."""
    if active_state(conn, name) in RUNNING_STATES:
        return False
    conn.run(root.argv(["systemctl", "start", name]), timeout=120, check=True)
    return True
