"""Event sinks: rich lines and progress bars for people, one JSON object per line for scripts.

The terminal says as much as the invocation's verbosity asks (orchestrator/verbosity.py): `-q` only what
failed; the default the phases with their progress, warnings and notes, a phase's passing checks summed up on
its end line (the ones that warn or fail in full); `-v` every check line as it comes. The JSON sink and the
audit log always get every event.
"""

from __future__ import annotations

import json
import sys
import threading
from collections import Counter

from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, Progress, TaskProgressColumn, TextColumn, TimeElapsedColumn

from ..verbosity import Verbosity, level
from .events import Event, Kind, Phase


def check_shown(status: str, verbosity: Verbosity) -> bool:
    """Whether a check line is printed as it comes: -v all, the default those that warn or fail (an advisory
    failure included), -q only the failures that stop the command."""
    word = status.split()[0] if status.strip() else ""
    if verbosity is Verbosity.VERBOSE:
        return True
    if verbosity is Verbosity.QUIET:
        return word == "fail" and "advisory" not in status
    return word in ("warn", "fail")


def check_summary(tally: Counter, skipped: list[str]) -> str:
    """'29 checks: 27 ok, 2 skip (model-fit, jit-cache)', or '27 checks ok': the checks a phase judged, by
    status; the skipped ones named (a skip is never silent)."""
    total = sum(tally.values())
    if set(tally) == {"ok"}:
        return f"{total} check{'s' if total != 1 else ''} ok"
    parts = [f"{n} {status}" + (f" ({', '.join(skipped)})" if status == "skip" and skipped else "")
             for status, n in sorted(tally.items(), key=lambda item: (item[0] != "ok", item[0]))]
    return f"{total} check{'s' if total != 1 else ''}: " + ", ".join(parts)


class TerminalSink:
    def __init__(self, console: Console | None = None, verbosity: Verbosity | None = None):
        self.console = console or Console(highlight=False, soft_wrap=True, emoji=False)
        self.verbosity = verbosity or level()
        self._bar: Progress | None = None
        self._tasks: dict = {}
        self._lock = threading.Lock()
        self._open: list[Phase] = []
        self._checks: dict[Phase, tuple[Counter, list[str]]] = {}  # per open phase: statuses, skipped names

    def handle(self, event: Event) -> None:
        kind, where = event.kind, f"{escape(event.node)}: " if event.node else ""
        quiet = self.verbosity is Verbosity.QUIET
        if kind is Kind.PHASE_START:
            self._open.append(event.phase)
        if kind is Kind.CHECK:
            self._check(event)
        elif kind is Kind.PHASE_END:
            self._end(event)
        elif quiet or kind is Kind.RESULT:
            return  # -q: errors (said by the command) and the result; the result the command prints itself
        elif kind is Kind.PHASE_START:
            detail = event.data.get("detail")
            self.console.print(f"[bold cyan]→[/] {escape(str(event.phase))}" + (f" [dim]{escape(detail)}[/]" if detail else ""))
        elif kind is Kind.PROGRESS:
            self._progress(event.data["label"], event.data["done"], event.data["total"])
        elif kind is Kind.WARNING:
            self.console.print(f"  [yellow]warning[/]: {where}{escape(event.message)}")
        elif kind in (Kind.CONTAINER_STARTED, Kind.CONTAINER_STOPPED, Kind.CONTAINER_REMOVED, Kind.CONTAINER_RESTARTED):
            verb = str(kind).removeprefix("container-")
            self.console.print(f"  {where}{verb} {escape(event.message)}")
        else:
            self.console.print(f"  {where}{escape(event.message)}")

    def _check(self, event: Event) -> None:
        """A check line in full when the verbosity shows it, or outside a phase (no end line will sum it up)
        unless -q; inside a phase every check is counted for the phase's end line."""
        status = str(event.data["status"])
        in_phase = event.phase in self._open
        if check_shown(status, self.verbosity) or (not in_phase and self.verbosity is not Verbosity.QUIET):
            self.console.print(f"  {escape(event.data['name'])}: {escape(status)} — {escape(event.message)}")
        if in_phase:
            tally, skipped = self._checks.setdefault(event.phase, (Counter(), []))
            tally[status] += 1
            if status.startswith("skip"):
                skipped.append(event.data["name"])

    def _end(self, event: Event) -> None:
        self._stop_bar()
        if event.phase in self._open:  # the innermost of that name
            del self._open[len(self._open) - 1 - self._open[::-1].index(event.phase)]
        tally, skipped = self._checks.pop(event.phase, (Counter(), []))
        failed = event.data["status"] != "ok"
        if self.verbosity is Verbosity.QUIET and not failed:
            return
        mark = "[red]✗[/]" if failed else "[green]✓[/]"
        summary = f" [dim]— {escape(check_summary(tally, skipped))}[/]" if tally else ""
        self.console.print(f"{mark} {escape(str(event.phase))} [dim]{event.data['seconds']:.2f}s[/]{summary}")

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
