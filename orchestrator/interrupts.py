"""Ctrl-C and SIGTERM as exceptions that know their signal, and which one reached the current command.

A command may turn its interrupt into a failure after undoing its work (`up`), or stop quietly (`logs -f`);
the CLI still exits 128 + the first signal's number (130, 143), so a script can tell "stopped" from
"failed". A leaf module (standard library only): `validate` and `--help` load it without the transport.
"""

from __future__ import annotations

import contextlib
import signal
from collections.abc import Iterator


class Interrupted(KeyboardInterrupt):
    """A KeyboardInterrupt that knows which signal caused it, so SIGTERM is not reported as Ctrl-C."""

    def __init__(self, signal_name: str = "SIGINT"):
        self.signal_name = signal_name
        super().__init__(signal_name)


def interrupt_reason(exc: BaseException) -> str:
    """'interrupted (SIGTERM)' for an Interrupted, 'interrupted (Ctrl-C)' for a plain KeyboardInterrupt."""
    name = getattr(exc, "signal_name", None)
    return f"interrupted ({name})" if name and name != "SIGINT" else "interrupted (Ctrl-C)"


_RECEIVED: list[signal.Signals] = []  # since forget_interrupts(), first first (signals arrive in the main thread)


def forget_interrupts() -> None:
    """A new command starts: nothing has interrupted it yet."""
    _RECEIVED.clear()


def remember_interrupt(sig: signal.Signals) -> None:
    """An interrupt that arrived another way (Python's own KeyboardInterrupt) counts too."""
    _RECEIVED.append(sig)


def first_interrupt() -> signal.Signals | None:
    """The first signal that interrupted the current command, whatever the command made of it."""
    return _RECEIVED[0] if _RECEIVED else None


@contextlib.contextmanager
def signals_interrupt(signals: tuple[int, ...] = (signal.SIGINT, signal.SIGTERM)) -> Iterator[None]:
    """Within the block, SIGINT and SIGTERM raise `Interrupted(<name>)` in the main thread (then restored),
    each remembered for first_interrupt()."""
    def handler(signum, _frame) -> None:
        _RECEIVED.append(signal.Signals(signum))
        raise Interrupted(signal.Signals(signum).name)

    previous = {sig: signal.getsignal(sig) for sig in signals}
    for sig in signals:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
