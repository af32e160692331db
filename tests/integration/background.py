"""A CLI command in the background, for tests that act while it runs (signals, a second command)."""

from __future__ import annotations

import json
import os
import queue
import subprocess
import tempfile
import threading
import time

import cli_json
from deploy_helpers import CLI


class Background:
    """A CLI command in the background; with --json its events arrive on a queue, waited on with a bound."""

    def __init__(self, *args: str, env: dict | None = None, events: bool = False):
        self.stderr_file = tempfile.TemporaryFile(mode="w+")
        self.stdout_file = None if events else tempfile.TemporaryFile(mode="w+")
        self.proc = subprocess.Popen([*CLI, *map(str, args)],
                                     stdout=subprocess.PIPE if events else self.stdout_file,
                                     stderr=self.stderr_file, text=True,
                                     env={**os.environ, "COLUMNS": "200", **(env or {})})
        self.events: list[dict] = []  # the stream's events; its last line, the --json envelope, is kept apart
        self.envelope: dict | None = None
        self.raw: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        self._reader = None
        if events:
            self._reader = threading.Thread(target=self._read, daemon=True)
            self._reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.raw.append(line)
            try:
                event = json.loads(line)
            except ValueError:
                continue
            if isinstance(event, dict) and "event" not in event and {"ok", "result", "error"} <= set(event):
                self.envelope = cli_json.envelope(line)  # validated against the shipped contract
                continue
            self.events.append(event)
            self._queue.put(event)
        self._queue.put(None)

    def wait_for(self, predicate, timeout: float = 180) -> dict:
        deadline = time.monotonic() + timeout
        while True:
            try:
                event = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no matching event within {timeout:.0f} s; events: {self.events[-10:]}") from None
            if event is None:
                raise AssertionError(f"ended (exit {self.proc.wait()}) before the event; stderr:\n{self.stderr()}")
            if predicate(event):
                return event

    def finish(self, timeout: float = 300) -> int:
        code = self.proc.wait(timeout=timeout)
        if self._reader is not None:
            self._reader.join(10)
        return code

    def stdout(self) -> str:
        if self.stdout_file is None:
            return "".join(self.raw)
        self.stdout_file.seek(0)
        return self.stdout_file.read()

    def stderr(self) -> str:
        self.stderr_file.seek(0)
        return self.stderr_file.read()

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def up_json(recipe, inventory, *args: str, env: dict | None = None) -> Background:
    """`up --json` in the background, its events on the queue."""
    return Background("up", recipe, "-i", inventory, "--json", *args, env=env, events=True)
