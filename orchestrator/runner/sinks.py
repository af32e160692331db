"""Event sinks: rich lines and progress bars for people, one JSON object per line for scripts."""

from __future__ import annotations

import json
import sys
import threading

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from .events import Event, Kind


class TerminalSink:
    def __init__(self, console: Console | None = None):
        self.console = console or Console(highlight=False, soft_wrap=True, emoji=False)
        self._bar: Progress | None = None
        self._tasks: dict = {}
        self._lock = threading.Lock()

    def handle(self, event: Event) -> None:
        kind, where = event.kind, f"{escape(event.node)}: " if event.node else ""
        if kind is Kind.PHASE_START:
            detail = event.data.get("detail")
            self.console.print(f"[bold cyan]→[/] {escape(str(event.phase))}" + (f" [dim]{escape(detail)}[/]" if detail else ""))
        elif kind is Kind.PHASE_END:
            self._stop_bar()
            mark = "[green]✓[/]" if event.data["status"] == "ok" else "[red]✗[/]"
            self.console.print(f"{mark} {escape(str(event.phase))} [dim]{event.data['seconds']:.2f}s[/]")
        elif kind is Kind.PROGRESS:
            self._progress(event.data["label"], event.data["done"], event.data["total"])
        elif kind is Kind.WARNING:
            self.console.print(f"  [yellow]warning[/]: {where}{escape(event.message)}")
        elif kind is Kind.RESULT:
            return  # the command prints its own summary
        elif kind is Kind.CHECK:
            self.console.print(f"  {escape(event.data['name'])}: {escape(event.data['status'])} — {escape(event.message)}")
        elif kind in (Kind.CONTAINER_STARTED, Kind.CONTAINER_STOPPED, Kind.CONTAINER_REMOVED, Kind.CONTAINER_RESTARTED):
            verb = str(kind).removeprefix("container-")
            self.console.print(f"  {where}{verb} {escape(event.message)}")
        else:
            self.console.print(f"  {where}{escape(event.message)}")

    def _progress(self, label: str, done: int, total: int) -> None:
        with self._lock:
            if self._bar is None:
                self._bar = Progress(TextColumn("  {task.description}"), BarColumn(), TaskProgressColumn(),
                                     TextColumn("{task.completed}/{task.total}"), TimeElapsedColumn(),
                                     console=self.console, transient=False)
                self._bar.start()
            if label not in self._tasks:
                self._tasks[label] = self._bar.add_task(label, total=total)
            self._bar.update(self._tasks[label], completed=done, total=max(total, done))

    def _stop_bar(self) -> None:
        with self._lock:
            if self._bar is not None:
                self._bar.stop()
                self._bar, self._tasks = None, {}

    def close(self) -> None:
        self._stop_bar()


class JsonSink:
    """One JSON object per line on stdout; progress only when it moved."""

    def __init__(self, stream=None):
        self.stream = stream or sys.stdout
        self._last: dict = {}

    def handle(self, event: Event) -> None:
        if event.kind is Kind.PROGRESS:
            label, done = event.data["label"], event.data["done"]
            if self._last.get(label) == done:
                return
            self._last[label] = done
        self.stream.write(json.dumps(event.as_dict(), default=str) + "\n")
        self.stream.flush()

    def close(self) -> None:
        pass
