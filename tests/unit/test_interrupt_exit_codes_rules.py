"""Every command exits 130 on SIGINT and 143 on SIGTERM (128 + the signal), whatever it made of the interrupt:
left uncaught (`watch`), turned into a failure after its undo (`up`, `bench`, `model pull`), or a quiet stop
(`logs -f`). Real signals to a child process that runs a command inside cli/common.exit_codes."""

from __future__ import annotations

import signal

import pytest
from signal_child import signal_child

CHILD = """
import json, sys, threading
import typer
from orchestrator.cli.common import Failed, exit_codes
from orchestrator.interrupts import signals_interrupt

mode = sys.argv[1]
app = typer.Typer()


@app.command()
def command() -> None:
    with exit_codes():
        try:
            if mode == "own-handler":  # `up`, `model pull`: the command sets its handlers itself
                with signals_interrupt():
                    print("ready", flush=True)
                    threading.Event().wait(120)
            else:
                print("ready", flush=True)
                threading.Event().wait(120)
        except KeyboardInterrupt:
            if mode in ("fails", "own-handler"):
                raise Failed("interrupted: undone")
            if mode == "quiet":
                return
            raise
        print("not interrupted", flush=True)


try:
    app([], prog_name="x")
except SystemExit as exc:
    print(json.dumps({"code": exc.code}))
"""


@pytest.mark.parametrize("mode", ["uncaught", "fails", "quiet", "own-handler"])
@pytest.mark.parametrize("sig, code", [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_command_exits_128_plus_the_signal(mode, sig, code):
    said, _ = signal_child(CHILD, sig, timeout=60, args=[mode])
    assert said == {"code": code}


@pytest.mark.timeout(150)  # a bound on a hang: two exit_codes() in a child Python on a loaded 2-core machine
def test_a_command_no_signal_reached_keeps_its_own_code():
    """The record of interrupts is per command: an earlier command's Ctrl-C does not change a later one's code."""
    said, _ = signal_child(CHILD + """
import signal, os
from orchestrator.interrupts import first_interrupt
with exit_codes():
    pass
print(json.dumps({"after": str(first_interrupt())}))
""", signal.SIGINT, timeout=120, args=["quiet"])
    assert said == {"after": "None"}
