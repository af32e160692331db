"""Structured events: what a long command is doing, read alike by the terminal, `--json` and the audit log.

Phases, event kinds and outcomes are enums; the string values are the wire format of `--json`.
"""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Iterator, Protocol


class Phase(StrEnum):
    CONNECT = "connect"
    LOCK = "lock"
    MODEL = "model"
    PREFLIGHT = "preflight"
    CURRENT = "current state"
    RELEASE = "release"
    IMAGE = "image"
    SECRETS = "secrets"
    STOP_PREVIOUS = "stop previous"
    PORTS = "ports"
    MEMORY = "memory"
    HEAD = "head"
    RENDEZVOUS = "rendezvous"
    PEERS = "peers"
    FORGET_SECRETS = "forget secrets"
    READY = "ready"
    LOG_CHECKS = "log checks"
    AFTER_READY = "after ready"
    ACCEPTANCE = "acceptance"
    UNDO = "undo"
    RESTORE = "restore"
    DOWN = "down"


class Kind(StrEnum):
    PHASE_START = "phase-start"
    PHASE_END = "phase-end"
    NOTE = "note"
    WARNING = "warning"
    PROGRESS = "progress"
    CONTAINER_STARTED = "container-started"
    CONTAINER_STOPPED = "container-stopped"
    CONTAINER_REMOVED = "container-removed"
    CONTAINER_RESTARTED = "container-restarted"
    IMAGE_MOVED = "image-moved"
    CHECK = "check"
    WAITING = "waiting"
    RESULT = "result"


class Outcome(StrEnum):
    OK = "ok"
    FAILED = "failed"


@dataclass(frozen=True)
class Event:
    kind: Kind
    phase: Phase | None = None
    node: str | None = None
    message: str = ""
    data: dict = field(default_factory=dict)
    at: float = field(default_factory=time.time)

    def as_dict(self) -> dict:
        out: dict = {"event": str(self.kind)}
        if self.phase is not None:
            out["phase"] = str(self.phase)
        if self.node is not None:
            out["node"] = self.node
        if self.message:
            out["message"] = self.message
        return {**out, **self.data}


class Sink(Protocol):
    def handle(self, event: Event) -> None: ...
    def close(self) -> None: ...


@dataclass
class PhaseRecord:
    phase: Phase
    seconds: float
    outcome: Outcome


class Events:
    """The event bus of one command: helpers that build events, and every sink that reads them."""

    def __init__(self, *sinks: Sink):
        self.sinks = list(sinks)
        self.current: Phase | None = None  # the innermost open phase; after it ends, the last one that ran
        self._open: list[Phase] = []
        self.phases: list[PhaseRecord] = []
        self.history: list[Event] = []
        self._lock = threading.Lock()

    def emit(self, event: Event) -> None:
        with self._lock:
            self.history.append(event)
            for sink in self.sinks:
                sink.handle(event)

    def _make(self, kind: Kind, message: str = "", node: str | None = None, **data) -> None:
        self.emit(Event(kind, self.current, node, message, data))

    @contextmanager
    def phase(self, phase: Phase, detail: str = "") -> Iterator[None]:
        self._open.append(phase)
        self.current = phase
        self.emit(Event(Kind.PHASE_START, phase, data={"detail": detail} if detail else {}))
        started = time.monotonic()
        outcome = Outcome.FAILED
        try:
            yield
            outcome = Outcome.OK
        finally:
            seconds = time.monotonic() - started
            self.phases.append(PhaseRecord(phase, seconds, outcome))
            self.emit(Event(Kind.PHASE_END, phase, data={"status": str(outcome), "seconds": round(seconds, 3)}))
            self._open.pop()
            self.current = self._open[-1] if self._open else phase  # never an earlier phase that already ended

    def timings(self) -> dict[str, float]:
        """Seconds per phase that ran, in order; a phase that ran again (`rendezvous`: the head listening,
        then the peers joined) keeps every run, the later ones numbered (`rendezvous #2`)."""
        out: dict[str, float] = {}
        for record in self.phases:
            name, n = str(record.phase), 1
            while name in out:
                n += 1
                name = f"{record.phase} #{n}"
            out[name] = round(record.seconds, 3)
        return out

    def note(self, message: str, node: str | None = None) -> None:
        self._make(Kind.NOTE, message, node)

    def warn(self, message: str, node: str | None = None) -> None:
        self._make(Kind.WARNING, message, node)

    def progress(self, label: str, done: int, total: int) -> None:
        self._make(Kind.PROGRESS, label=label, done=done, total=total)

    def container(self, kind: Kind, node: str, name: str, container_id: str, message: str = "") -> None:
        self._make(kind, message or f"{name} ({container_id[:12]})", node, container=name, id=container_id)

    def image_moved(self, source: str, target: str, image_id: str, moved: int, route: str) -> None:
        self._make(Kind.IMAGE_MOVED, f"{source} → {target}: {moved} bytes ({route})", target,
                   source=source, image_id=image_id, bytes=moved, route=route)

    def check(self, name: str, status: str, per_node: dict, detail: str = "") -> None:
        self._make(Kind.CHECK, detail, None, name=name, status=status, per_node=per_node)

    def emit_waiting(self, what: str, elapsed: float, node: str | None, line: str | None, age: float | None) -> None:
        """A heartbeat of a long wait: how long, and the newest log line with its age."""
        if line is None:
            message = f"still waiting for {what}: {elapsed:.0f} s, no log line yet"
        else:
            message = f"still waiting for {what}: {elapsed:.0f} s; last log line {age:.0f} s ago on {node}: {line[:160]}"
        self._make(Kind.WAITING, message, node, what=what, elapsed=round(elapsed, 1),
                   last_line=line, last_line_age=None if age is None else round(age, 1))

    def result(self, ok: bool, **data) -> None:
        self._make(Kind.RESULT, "", None, ok=ok, **data)

    def close(self) -> None:
        for sink in self.sinks:
            sink.close()
