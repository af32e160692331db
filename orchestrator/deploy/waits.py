"""Waits that watch liveness and keep their reason.

A probe returns `Seen(ok, what)`: whether the condition holds and what it saw (status and body excerpt,
"connection refused", ...). A wait that runs out raises WaitTimeout with the last thing seen — its own
type, distinct from FailureSeen (a container died). A probe that learns the answer can never come (a 4xx
from the server) raises Rejected, which fails the wait at once.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from .watch import Monitor


@dataclass(frozen=True)
class Seen:
    ok: bool
    what: str = ""


class WaitTimeout(Exception):
    def __init__(self, node: str, what: str, timeout: float, last_seen: str, excerpt: list[str] | None = None):
        self.node, self.what, self.timeout, self.last_seen = node, what, timeout, last_seen
        self.excerpt = excerpt or []
        text = f"{node}: timed out after {timeout:.0f} s waiting for {what}; last seen: {last_seen or 'nothing'}"
        if self.excerpt:
            text += "\n  last log lines:\n" + "\n".join(f"    | {line}" for line in self.excerpt)
        super().__init__(text)


class Rejected(Exception):
    """The server answered in a way that waiting cannot change (e.g. 404 model does not exist)."""

    def __init__(self, node: str, what: str, seen: str):
        self.node = node
        super().__init__(f"{node}: {what}: {seen}")


@dataclass
class Tick:
    """Called about every `every` seconds while a wait is alive (elapsed seconds), to show it is."""

    every: float
    call: Callable[[float], None]
    _next: float = field(default=0.0)


def wait_until(probe: Callable[[], Seen], monitor: Monitor, *, timeout: float, interval: float, what: str,
               node: str, tick: Tick | None = None) -> Seen:
    """Probe every `interval` s (and on every new log line) until ok; fail at once if a watched container
    fails, even while a probe is blocked in I/O."""
    monitor.check()
    started = time.monotonic()
    last = Seen(False, "")
    if tick:
        tick._next = started + tick.every

    def attempt() -> Seen:
        nonlocal last
        last = monitor.call(probe)
        now = time.monotonic()
        if tick and now >= tick._next:
            tick._next = now + tick.every
            tick.call(now - started)
        return last

    retrying = Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(interval),
                        retry=retry_if_result(lambda seen: not seen.ok), sleep=monitor.sleep)
    try:
        return retrying(attempt)
    except RetryError:
        watch = monitor.watches.get(node)
        raise WaitTimeout(node, what, timeout, last.what, watch.excerpt() if watch else []) from None
