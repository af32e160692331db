"""A node whose SSH connection went away is a failure within seconds, not after a log wait times out.

`docker logs --follow` over a dead TCP connection blocks without an error for minutes; a short command
every few seconds with a true deadline notices at once.
"""

from __future__ import annotations

import threading

from ..transport.node import NodeConnection
from .watch import Failure, Monitor

EVERY = 2.0
DEADLINE = 5.0
MISSES = 2  # consecutive unanswered pings before the node counts as lost


class NodeLiveness:
    def __init__(self, conn: NodeConnection, monitor: Monitor, every: float = EVERY, deadline: float = DEADLINE):
        self.conn, self.monitor, self.every, self.deadline = conn, monitor, every, deadline
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"alive-{conn.name}", daemon=True)

    def start(self) -> "NodeLiveness":
        self._thread.start()
        return self

    def signal(self) -> None:
        """Ask the pinger to end (stop() then waits for it)."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=self.deadline + 1)

    def _run(self) -> None:
        missed, why = 0, ""
        while not self._stop.wait(self.every):
            try:
                answered = self.conn.run(["true"], timeout=self.deadline).ok
                why = "" if answered else "`true` failed"
            except Exception as exc:  # noqa: BLE001 - any transport error is a missed ping
                answered, why = False, str(exc)
            missed = 0 if answered else missed + 1
            if missed >= MISSES and not self._stop.is_set():
                self.monitor.fail(Failure(
                    self.conn.name, f"lost the connection to {self.conn.name}: no answer over SSH for "
                    f"{MISSES * self.deadline:.0f} s ({why})",
                    "the node, the network to it, or its sshd went away: what runs there could not be checked, "
                    "and may not be removable from here"))
                return
