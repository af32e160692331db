"""One cancel token per cluster: setting it stops every remote command of every connection at once.

Ctrl-C and SIGTERM arrive in the main thread only; worker threads blocked on SSH channels never see
them. The token is how the main thread reaches them: a group call that is interrupted sets it, every
NodeConnection subscribed to it kills its in-flight remote process groups and closes their channels,
and every blocked call wakes up raising `Cancelled`.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

# Where they live (a leaf module, so the CLI reads them without loading the transport); re-exported here.
from ..interrupts import Interrupted, interrupt_reason, signals_interrupt  # noqa: F401


class Cancelled(Exception):
    """The work was stopped on purpose (Ctrl-C, SIGTERM, a failure elsewhere); `reason` says why."""

    def __init__(self, reason: str):
        self.reason = reason
        super().__init__(f"cancelled: {reason}")


class CancelToken:
    """Set once (the first reason wins); callbacks registered with `on_set` run when it is set."""

    def __init__(self) -> None:
        self._event = threading.Event()
        self._lock = threading.Lock()
        self._reason: str | None = None
        self._callbacks: dict[int, Callable[[str], None]] = {}
        self._next = 0

    def set(self, reason: str = "cancelled") -> bool:
        """Cancel; returns False if it was already set. Callbacks run in this thread and must be quick."""
        with self._lock:
            if self._event.is_set():
                return False
            self._reason = reason
            self._event.set()
            callbacks = list(self._callbacks.values())
        for callback in callbacks:
            try:
                callback(reason)
            except Exception:  # noqa: BLE001 - one subscriber's failure must not stop the others
                pass
        return True

    def is_set(self) -> bool:
        return self._event.is_set()

    @property
    def reason(self) -> str | None:
        return self._reason

    def wait(self, timeout: float | None = None) -> bool:
        return self._event.wait(timeout)

    def check(self) -> None:
        """Raise Cancelled if the token is set."""
        if self._event.is_set():
            raise Cancelled(self._reason or "cancelled")

    def on_set(self, callback: Callable[[str], None]) -> Callable[[], None]:
        """Call `callback(reason)` when the token is set (at once if it already is); returns an unsubscribe."""
        with self._lock:
            if not self._event.is_set():
                key = self._next
                self._next += 1
                self._callbacks[key] = callback
                return lambda: self._callbacks.pop(key, None)
        callback(self._reason or "cancelled")
        return lambda: None
