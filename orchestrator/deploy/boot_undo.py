"""The changes `boot enable` makes on a node, each written down with its undo as soon as it is made, so that
a failure partway (the second node's systemctl refusing, its SSH dropping) puts back every node as it was:
what was turned off comes back on, the restart policy cleared is set again, an earlier unit file of ours
that was overwritten is written back, and a unit newly installed is disabled and removed.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass, field
from typing import Callable

from ..facts.boot import BootItem, ItemKind
from ..render.unit import BootUnit
from ..transport.node import NodeConnection
from . import privilege


@dataclass
class Change:
    node: str
    what: str  # what was done, in words: "unit old-stack.service turned off"
    undone_as: str  # what the undo does, in words: "unit old-stack.service enabled again"
    undo: Callable[[], None]


@dataclass
class Journal:
    """Changes in the order they were made (installs run on every node at once: appends are locked)."""

    changes: list[Change] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def done(self, node: str, what: str, undone_as: str, undo: Callable[[], None]) -> None:
        with self._lock:
            self.changes.append(Change(node, what, undone_as, undo))

    def roll_back(self) -> tuple[list[str], list[str]]:
        """Undo every change, newest first, each tried whatever the others did: (put back, NOT put back)."""
        undone, left = [], []
        for change in reversed(self.changes):
            try:
                change.undo()
                undone.append(f"{change.node}: {change.undone_as}")
            except Exception as exc:  # noqa: BLE001 - every other change is still undone; this one is named
                left.append(f"{change.node}: {change.what} (undo failed: {exc})")
        return undone, left


def restart_policy(conn: NodeConnection, container: str) -> str:
    """A container's Docker restart policy as `docker update --restart` takes it: no, always, unless-stopped,
    on-failure:N."""
    out = conn.run(["docker", "container", "inspect", "--format", "{{json .HostConfig.RestartPolicy}}", container],
                   timeout=30, check=True).stdout
    return policy_text(json.loads(out))


def policy_text(policy: dict) -> str:
    """Pure: Docker's {"Name": ..., "MaximumRetryCount": N} -> the `--restart` value."""
    name = policy.get("Name") or "no"
    retries = int(policy.get("MaximumRetryCount") or 0)
    return f"{name}:{retries}" if name == "on-failure" and retries else name


def _set_policy(conn: NodeConnection, container: str, policy: str) -> None:
    conn.run(["docker", "update", "--restart", policy, container], timeout=60, check=True)


def turn_off(conn: NodeConnection, item: BootItem, root: privilege.Root, journal: Journal) -> None:
    """Make `item` no longer come back on boot, and write down how to make it come back."""
    if item.kind is ItemKind.UNIT:
        conn.run(root.argv(["systemctl", "disable", item.name]), timeout=60, check=True)
        journal.done(conn.name, f"unit {item.name} turned off", f"unit {item.name} enabled again",
                     lambda: conn.run(root.argv(["systemctl", "enable", item.name]), timeout=60, check=True))
        return
    policy = restart_policy(conn, item.name)
    _set_policy(conn, item.name, "no")
    journal.done(conn.name, f"container {item.name}'s restart policy {policy} cleared",
                 f"container {item.name}'s restart policy {policy} set again",
                 lambda: _set_policy(conn, item.name, policy))


def install(conn: NodeConnection, unit: BootUnit, root: privilege.Root, scratch_dir: str, journal: Journal) -> None:
    """Atomic write, the container's restart policy off (so dockerd does not start it at boot ahead of the
    unit), reload, enable (boot_supervise.start then starts it, attached to the running container); each
    step written down with its undo. An earlier file of ours at the same path is read first, to be written back on undo."""
    before = conn.run(["cat", "--", unit.path], timeout=30)
    earlier = before.stdout if before.ok else None
    was_enabled = conn.run(["systemctl", "is-enabled", unit.name], timeout=30).stdout.strip() == "enabled"
    reloaded = threading.Event()

    def put_back() -> None:
        if earlier is None:
            conn.run(root.argv(["rm", "-f", "--", unit.path]), timeout=30, check=True)
        else:
            root.put_file(conn, unit.path, earlier, scratch_dir)
        if reloaded.is_set():  # systemd read the new file: it must read the old state again
            conn.run(root.argv(["systemctl", "daemon-reload"]), timeout=60, check=True)

    root.put_file(conn, unit.path, unit.text, scratch_dir)
    journal.done(conn.name, f"{unit.path} written", f"{unit.path} " + (
        "written back as it was" if earlier is not None else "removed"), put_back)
    policy = restart_policy(conn, unit.container)
    _set_policy(conn, unit.container, "no")
    journal.done(conn.name, f"container {unit.container}'s restart policy {policy} cleared",
                 f"container {unit.container}'s restart policy {policy} set again",
                 lambda: _set_policy(conn, unit.container, policy))
    conn.run(root.argv(["systemctl", "daemon-reload"]), timeout=60, check=True)
    reloaded.set()
    conn.run(root.argv(["systemctl", "enable", unit.name]), timeout=60, check=True)
    if not was_enabled:
        journal.done(conn.name, f"unit {unit.name} enabled", f"unit {unit.name} disabled again",
                     lambda: conn.run(root.argv(["systemctl", "disable", unit.name]), timeout=60, check=True))
