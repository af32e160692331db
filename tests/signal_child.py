"""Deliver a signal to a child Python process, never to pytest itself (issue 17).

The child runs `code`, prints the line `ready` once it is blocked where the signal should land, then one
JSON object as its last line. `signal_child` sends the signal at `ready` and returns (that object, the
parent's CLOCK_MONOTONIC when it sent): the child's time.monotonic() reads the same clock, so a child can
report when it saw the signal and the parent can tell how promptly."""

from __future__ import annotations

import json
import os
import signal as signal_mod
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def signal_child(code: str, sig: int = signal_mod.SIGINT, timeout: float = 60,
                 args: list[str] | None = None) -> tuple[dict, float]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    proc = subprocess.Popen([sys.executable, "-c", code, *(args or [])], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env=env)
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        assert line.strip() == "ready", f"child said {line!r} before ready; stderr: {proc.stderr.read()}"
        sent = time.monotonic()
        proc.send_signal(sig)
        out, err = proc.communicate(timeout=timeout)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    lines = [ln for ln in out.splitlines() if ln.strip()]
    assert lines, f"the child printed nothing after ready (exit {proc.returncode}); stderr:\n{err}"
    return json.loads(lines[-1]), sent
