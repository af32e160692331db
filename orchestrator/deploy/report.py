"""How a long command tells the operator what it is doing: rich lines for people, JSON events for scripts."""

from __future__ import annotations

import json
import sys
import threading
import time
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn


@dataclass
class PhaseRecord:
    name: str
    seconds: float
    status: str  # ok | failed


@dataclass
class Reporter:
    """Base reporter: records phases; subclasses decide how to show them."""

    phases: list[PhaseRecord] = field(default_factory=list)
    current: str | None = None

    @contextmanager
    def phase(self, name: str, detail: str = "") -> Iterator[None]:
        self.current = name
        self._start(name, detail)
        started = time.monotonic()
        try:
            yield
        except BaseException:
            self.phases.append(PhaseRecord(name, time.monotonic() - started, "failed"))
            self._end(name, time.monotonic() - started, "failed")
            raise
        self.phases.append(PhaseRecord(name, time.monotonic() - started, "ok"))
        self._end(name, time.monotonic() - started, "ok")

    def note(self, message: str) -> None: ...
    def warn(self, message: str) -> None: ...
    def progress(self, label: str, done: int, total: int) -> None: ...
    def event(self, kind: str, **data) -> None: ...
    def _start(self, name: str, detail: str) -> None: ...
    def _end(self, name: str, seconds: float, status: str) -> None: ...
    def close(self) -> None: ...


@dataclass
class RichReporter(Reporter):
    console: Console = field(default_factory=lambda: Console(highlight=False, soft_wrap=True, emoji=False))
    _bar: Progress | None = None
    _tasks: dict = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    def _start(self, name: str, detail: str) -> None:
        self.console.print(f"[bold cyan]→[/] {escape(name)}" + (f" [dim]{escape(detail)}[/]" if detail else ""))

    def _end(self, name: str, seconds: float, status: str) -> None:
        self._stop_bar()
        mark = "[green]✓[/]" if status == "ok" else "[red]✗[/]"
        self.console.print(f"{mark} {escape(name)} [dim]{seconds:.2f}s[/]")

    def note(self, message: str) -> None:
        self.console.print(f"  {escape(message)}")

    def warn(self, message: str) -> None:
        self.console.print(f"  [yellow]warning[/]: {escape(message)}")

    def progress(self, label: str, done: int, total: int) -> None:
        with self._lock:
            if self._bar is None:
                self._bar = Progress(TextColumn("  {task.description}"), BarColumn(), TaskProgressColumn(),
                                     TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                     console=self.console, transient=False)
                self._bar.start()
            if label not in self._tasks:
                self._tasks[label] = self._bar.add_task(label, total=total)
            self._bar.update(self._tasks[label], completed=done, total=total)

    def _stop_bar(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar, self._tasks = None, {}

    def close(self) -> None:
        self._stop_bar()


@dataclass
class JsonReporter(Reporter):
    """One JSON object per line on stdout: {"event": ..., ...}."""

    _last_progress: dict = field(default_factory=dict)

    def event(self, kind: str, **data) -> None:
        sys.stdout.write(json.dumps({"event": kind, **data}, default=str) + "\n")
        sys.stdout.flush()

    def _start(self, name: str, detail: str) -> None:
        self.event("phase-start", phase=name, detail=detail)

    def _end(self, name: str, seconds: float, status: str) -> None:
        self.event("phase-end", phase=name, status=status, seconds=round(seconds, 3))

    def note(self, message: str) -> None:
        self.event("note", phase=self.current, message=message)

    def warn(self, message: str) -> None:
        self.event("warning", phase=self.current, message=message)

    def progress(self, label: str, done: int, total: int) -> None:
        if self._last_progress.get(label) != done:
            self._last_progress[label] = done
            self.event("progress", label=label, done=done, total=total)
