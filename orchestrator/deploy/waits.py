"""Waits that watch liveness: tenacity retries whose sleep wakes up (and raises) on the first failure."""

from __future__ import annotations

from typing import Callable

from tenacity import RetryError, Retrying, retry_if_result, stop_after_delay, wait_fixed

from .watch import Failure, FailureSeen, Monitor


def wait_until(condition: Callable[[], bool], monitor: Monitor, *, timeout: float, interval: float, what: str,
               node: str) -> None:
    """Check `condition` every `interval` s (and on every new log line) until true; fail at once if a
    watched container fails, even while a check is blocked in I/O."""
    monitor.check()
    retrying = Retrying(stop=stop_after_delay(timeout), wait=wait_fixed(interval),
                        retry=retry_if_result(lambda ok: not ok), sleep=monitor.sleep)
    try:
        retrying(lambda: monitor.call(condition))
    except RetryError:
        watch = monitor.watches.get(node)
        raise FailureSeen(Failure(node, f"timed out after {timeout:.0f} s waiting for {what}",
                                  "the container is alive but never got there", watch.excerpt() if watch else [])) from None
