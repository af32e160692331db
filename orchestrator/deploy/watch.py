"""Watch every started container while waiting: a known failure line or an exit fails the wait at once.

Readiness checks that do not first ask "is it still alive?" lie (field note 5): every wait in `up`
sleeps on the monitor, and every probe runs under it, so a crash interrupts the wait at once instead of
after a timeout.
"""

from __future__ import annotations

import re
import threading
import time
from datetime import datetime, timezone
from dataclasses import dataclass, field
from typing import Callable, TypeVar

from ..docker_cli.containers import inspect_container
from ..transport.node import NodeConnection
from .killers import earlyoom_note
from .signatures import Signature, consequence, explain_exit, match, more_telling

T = TypeVar("T")
MIN_RECHECK = 0.05  # a burst of log lines re-checks a condition at most this often
MAX_REFOLLOW = 5  # times a log stream that ends while its container runs is followed again
SIGNATURE_GRACE = 1.0  # seconds a process has to exit after logging a known failure line
_TIMESTAMP = re.compile(r"^(\d{4}-\d\d-\d\dT[\d:.]+Z) ?")


SETTLE = 0.4  # seconds after the first failure report during which an earlier failure may still arrive
SETTLE_MAX = 15.0  # ...and at most this long while a container known to have ended is still being inspected


def stamp_seconds(stamp: str | None) -> float | None:
    """Docker's RFC 3339 timestamp (nanoseconds, `Z`) as epoch seconds; None when absent or zero."""
    if not stamp or stamp.startswith("0001-"):
        return None
    found = re.match(r"(\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d)(?:\.(\d+))?", stamp)
    if not found:
        return None
    whole = datetime.fromisoformat(found.group(1)).replace(tzinfo=timezone.utc).timestamp()
    return whole + float("0." + (found.group(2) or "0"))


@dataclass
class Failure:
    node: str
    cause: str
    explanation: str
    excerpt: list[str] = field(default_factory=list)
    at: float = field(default_factory=time.time)  # when it happened (not when it was noticed)
    secondary: bool = False  # this rank only lost the head (signatures.consequence): another failure is the cause

    def __str__(self) -> str:
        text = f"{self.node}: {self.cause}"
        if self.explanation:
            text += f"\n  why: {self.explanation}"
        if self.excerpt:
            text += "\n  last log lines:\n" + "\n".join(f"    | {line}" for line in self.excerpt)
        return text


class FailureSeen(Exception):
    def __init__(self, failure: Failure):
        self.failure, self.node = failure, failure.node  # `node`: the runner names it in StepFailed.nodes
        super().__init__(str(failure))


class Monitor:
    """Failures reported by watchers, and a sleep that wakes up on them.

    The cause is the failure that happened first, not the first one noticed: a head killed during load
    makes its peer log an error too, and the peer's report can win the race. So a failure is raised only
    SETTLE seconds after the first report, and not while another watched container whose log has ended is
    still being asked why (bounded by SETTLE_MAX); the earliest by time of occurrence is the one named. A
    rank that only lost the head (its log says the store's connection closed) is a consequence: while only
    such failures are in, the monitor waits for the cause up to SETTLE_MAX (a head SIGTERMed by earlyoom
    closes its store first and dies seconds later), and names a cause before any consequence."""

    def __init__(self) -> None:
        self._failures: list[Failure] = []
        self._first_report: float | None = None
        self._ending: set[str] = set()  # watches whose log ended and whose report is on its way
        self._changed = threading.Condition()  # notified on a failure and on every new log line
        self.watches: dict[str, ContainerWatch] = {}
        self.helpers: list = []  # other threads with signal() and stop() that end with the watches (liveness pings)

    @property
    def failure(self) -> Failure | None:
        causes = [f for f in self._failures if not f.secondary] or self._failures
        return min(causes, key=lambda f: f.at) if causes else None

    def fail(self, failure: Failure) -> None:
        with self._changed:
            self._failures.append(failure)
            if self._first_report is None:
                self._first_report = time.monotonic()
            self._changed.notify_all()

    def activity(self) -> None:
        with self._changed:
            self._changed.notify_all()

    def ending(self, name: str, pending: bool) -> None:
        """A watch's log stream ended (pending) or its report is in (not): see the class docstring."""
        with self._changed:
            (self._ending.add if pending else self._ending.discard)(name)
            self._changed.notify_all()

    def _settle_left(self) -> float | None:
        """None: no failure; 0: settled (raise now); else seconds until the failure is settled."""
        if self._first_report is None:
            return None
        now = time.monotonic()
        waiting_for_cause = all(f.secondary for f in self._failures) and len(self.watches) > 1
        if (self._ending or waiting_for_cause) and now < self._first_report + SETTLE_MAX:
            if waiting_for_cause:
                return max(MIN_RECHECK, min(self._first_report + SETTLE_MAX - now, 0.25))
            return max(MIN_RECHECK, self._first_report + SETTLE - now)
        return max(0.0, self._first_report + SETTLE - now)

    def check(self) -> None:
        if self._settle_left() == 0.0:
            raise FailureSeen(self.failure)

    def sleep(self, seconds: float) -> None:
        """For tenacity: wait up to `seconds`, waking early on a new log line (e.g. "Application startup
        complete") so the caller re-checks at once; raise as soon as a failure has settled."""
        deadline = time.monotonic() + seconds
        earliest = time.monotonic() + MIN_RECHECK
        pending = False  # a line came sooner than MIN_RECHECK after the last check: re-check once that has passed
        with self._changed:
            while True:
                left = self._settle_left()
                if left == 0.0:
                    break
                now = time.monotonic()
                if left is None and (now >= deadline or (pending and now >= earliest)):
                    break
                wait = left if left is not None else deadline - now
                if pending and left is None:
                    wait = min(wait, earliest - now)
                woken = self._changed.wait(wait)
                if woken and left is None:
                    if time.monotonic() >= earliest:
                        break
                    pending = True  # not dropped: the last line of a burst (e.g. "Application startup complete")
        self.check()

    def call(self, probe: Callable[[], T]) -> T:
        """Run a blocking probe (an HTTP request, an SSH command) in a thread and return its result,
        but raise at once if a watched container fails meanwhile: a probe never hides a crash."""
        box: dict = {}
        done = threading.Event()

        def run() -> None:
            try:
                box["value"] = probe()
            except Exception as exc:  # re-raised in the caller's thread
                box["error"] = exc
            finally:
                done.set()
                self.activity()

        threading.Thread(target=run, name="probe", daemon=True).start()
        with self._changed:
            while not done.is_set() and self._settle_left() != 0.0:
                self._changed.wait(self._settle_left())
        self.check()
        if "error" in box:
            raise box["error"]
        return box["value"]

    def watch(self, conn: NodeConnection, container: str, on_line: Callable[[str, str], None] | None = None,
              name: str | None = None, since: str | None = None) -> "ContainerWatch":
        """Follow `container` (an ID; `name` for messages) on `conn`; one watched container per node.
        `since` (a Docker timestamp): only lines from then on, e.g. a restarted container's new start."""
        watch = ContainerWatch(conn, container, self, on_line, name)
        watch.last_stamp = since
        self.watches[conn.name] = watch
        watch.start()
        return watch

    def stop(self, containers: list[str] | None = None) -> None:
        """Stop watching (these containers, or all): their remote `docker logs -f` ends too. Every one is
        told first, then each is waited for: each ends with a kill round trip to its node, which overlap
        instead of adding up (one after another they cost ~0.1 s per watched container at the end of `up`)."""
        ending = [w for w in list(self.watches.values()) if containers is None or w.container in containers]
        if containers is None:
            ending += list(self.helpers)
        for part in ending:
            part.signal()
        for part in ending:
            part.stop()

    def newest(self) -> tuple[str, str, float] | None:
        """(node, text, age in s) of the newest log line of any watched container."""
        seen = [(w.last_at, w.conn.name, w.lines[-1]) for w in self.watches.values() if w.lines and w.last_at]
        if not seen:
            return None
        at, node, text = max(seen)
        return node, text, time.monotonic() - at


class ContainerWatch:
    """Streams `docker logs -f` of one container; its end means the container stopped."""

    def __init__(self, conn: NodeConnection, container: str, monitor: Monitor,
                 on_line: Callable[[str, str], None] | None, name: str | None = None):
        self.conn, self.container, self.monitor, self.on_line = conn, container, monitor, on_line
        self.name = name or container
        self.signature_at: float | None = None
        self.lines: list[str] = []  # log text without the docker timestamp
        self.signature_line: str | None = None  # the most telling known failure line seen (first of its kind)
        self.signature: Signature | None = None  # ...and what it matched
        self.last_stamp: str | None = None  # docker's timestamp of the last line, to resume a broken stream
        self.last_at: float | None = None  # monotonic time the last line arrived
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{conn.name}", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def signal(self) -> None:
        """Ask the stream to end (stop() then waits for it)."""
        self._stop.set()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=2)

    def excerpt(self, count: int = 15) -> list[str]:
        return self.lines[-count:]

    def _line(self, raw: str) -> None:
        stamp = _TIMESTAMP.match(raw)
        if stamp:
            self.last_stamp = stamp.group(1)
        text = _TIMESTAMP.sub("", raw, count=1)
        self.lines.append(text)
        self.last_at = time.monotonic()
        self.monitor.activity()
        if self.on_line:
            self.on_line(self.conn.name, text)
        signature = match(text)
        if signature and signature.fatal and more_telling(signature, self.signature):
            first = self.signature is None
            self.signature_line, self.signature = text.strip(), signature
            if first:
                # Most failure lines are followed by the process exiting: give it a moment so the report carries
                # the exit code (and a root cause logged on the other stream); a process that logs the line and
                # stays up (ring-buffer stall) fails anyway.
                self.signature_at = stamp_seconds(self.last_stamp if stamp else None) or time.time()
                timer = threading.Timer(SIGNATURE_GRACE, self._fail_with_excerpt)
                timer.daemon = True
                timer.start()

    def _fail_with_excerpt(self) -> None:
        if not self._stop.is_set() and self.signature is not None:
            self.monitor.fail(Failure(self.conn.name, f"{self.name} logged: {self.signature_line}",
                                      self.signature.explanation, self.excerpt(), at=self.signature_at))

    def _run(self) -> None:
        since: list[str] = ["--since", self.last_stamp] if self.last_stamp else []
        for _ in range(MAX_REFOLLOW + 1):
            try:
                self.conn.stream(["docker", "logs", "--follow", "--timestamps", *since, self.container],
                                 self._line, self._stop)
            except Exception as exc:  # the SSH session itself went away
                if not self._stop.is_set():
                    self.monitor.fail(Failure(self.conn.name, f"lost the connection while watching {self.name}: "
                                                              f"{exc}", "the node or its sshd went down", self.excerpt()))
                return
            if self._stop.is_set():
                return
            self.monitor.ending(self.conn.name, True)
            try:
                state = inspect_container(self.conn, self.container)
            except Exception as exc:
                state, error = None, exc
            else:
                error = None
            if state is None or not state.running:
                break
            # The stream ended but the container lives (its engine restarted?): follow again from where we were.
            self.monitor.ending(self.conn.name, False)
            since = ["--since", self.last_stamp] if self.last_stamp else []
        else:
            self.monitor.fail(Failure(self.conn.name, f"cannot follow the log of {self.name}",
                                      "`docker logs --follow` keeps ending while the container runs (logging driver?)",
                                      self.excerpt()))
            return
        try:
            self._report_end(state, error)
        finally:
            self.monitor.ending(self.conn.name, False)

    def _report_end(self, state, error: Exception | None) -> None:
        # the most telling fatal line is the root cause; else the last known line
        known = self.signature or next((sig for sig in map(match, reversed(self.lines)) if sig), None)
        if state is None:
            cause = f"{self.name} is gone" + (f" ({error})" if error else "")
            why = known.explanation if known else "the container disappeared while starting"
            at = time.time()
        else:
            cause = f"{self.name} exited with code {state.exit_code}"
            if self.signature_line:
                cause += f" after logging: {self.signature_line}"
            why = known.explanation if known else explain_exit(state.exit_code, state.oom_killed)
            killer = earlyoom_note(self.conn, state.exit_code)
            why += f"; {killer}" if killer else ""
            at = stamp_seconds((state.raw.get("State") or {}).get("FinishedAt")) or time.time()
        self.monitor.fail(Failure(self.conn.name, cause, why, self.excerpt(),
                                  at=min(at, self.signature_at) if self.signature_at else at,
                                  secondary=consequence(self.lines[-50:])))
