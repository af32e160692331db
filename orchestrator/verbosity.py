"""How much a command says on the terminal: `-q` errors and the result only; the default its phases with
progress, each phase's checks summed up in one line unless one warns or fails; `-v` every check line.

One level per invocation: the CLI's `-q`/`-v` set it (cli/conventions.py), the terminal event sink reads it
(runner/sinks.TerminalSink). `--json` and the audit log get every event whatever the level. A leaf module
(standard library only), so `--help` does not pay for the sinks.
"""

from __future__ import annotations

from enum import StrEnum


class Verbosity(StrEnum):
    QUIET = "quiet"
    NORMAL = "normal"
    VERBOSE = "verbose"


_LEVEL = {"now": Verbosity.NORMAL}


def set_level(level: Verbosity) -> None:
    _LEVEL["now"] = level


def level() -> Verbosity:
    """This invocation's level (NORMAL unless -q or -v was given)."""
    return _LEVEL["now"]
