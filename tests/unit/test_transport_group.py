"""The node group and the cancel token with fake callables: failures collected, cancel and Ctrl-C return
promptly although workers block, workers get their grace to clean up, SIGTERM is named as SIGTERM (the
signals go to a child process, tests/signal_child.py, never to pytest itself)."""

from __future__ import annotations

import signal
import threading
import time

import pytest

from signal_child import signal_child

from orchestrator.transport.cancel import Cancelled, CancelToken, interrupt_reason
from orchestrator.transport.group import GroupError, on_all


def test_every_outcome_is_collected_then_raised_once():
    def fn(n: int) -> int:
        if n % 2:
            raise ValueError(f"odd {n}")
        return n * 10

    with pytest.raises(GroupError) as caught:
        on_all(range(5), fn, str)
    assert caught.value.results == {"0": 0, "2": 20, "4": 40}
    assert sorted(caught.value.failures) == ["1", "3"]
    assert "odd 1" in str(caught.value) and "odd 3" in str(caught.value)
    assert on_all(range(3), lambda n: n + 1, str) == {"0": 1, "1": 2, "2": 3}


def test_the_cancel_token_returns_promptly_while_workers_block():
    token = CancelToken()
    never = threading.Event()
    threading.Timer(0.3, token.set, args=("a failure elsewhere",)).start()
    started = time.monotonic()
    with pytest.raises(Cancelled) as caught:
        on_all(range(3), lambda n: never.wait(60), str, cancel=token, grace=0.5)
    assert time.monotonic() - started < 30  # not the workers' 60 s: the token, not their end, returned
    assert caught.value.reason == "a failure elsewhere"
    never.set()


def test_workers_that_stop_on_the_token_are_waited_for_and_cleanup_runs():
    token = CancelToken()
    cleaned: list[int] = []

    def worker(n: int) -> None:
        token.wait(60)
        time.sleep(0.1 * n)  # cleanup that takes a moment, well within the grace
        cleaned.append(n)
        raise Cancelled(token.reason or "")

    threading.Timer(0.2, token.set, args=("stop",)).start()
    with pytest.raises(Cancelled):
        on_all(range(3), worker, str, cancel=token, grace=1.5)
    assert sorted(cleaned) == [0, 1, 2]


BLOCKED_GROUP = """
import json, signal, threading, time
from orchestrator.transport.cancel import CancelToken, Interrupted, interrupt_reason, signals_interrupt
from orchestrator.transport.group import on_all
token, never, seen, started = CancelToken(), threading.Event(), [], []
token.on_set(seen.append)
def work(n):  # `ready` from the first worker: the signal often lands while on_all still starts the others
    started.append(n)
    if len(started) == 1:
        print("ready", flush=True)
    never.wait(60)
before = signal.getsignal(signal.SIGTERM)
out = {}
try:
    with signals_interrupt() if TERM else __import__("contextlib").nullcontext():
        on_all(range(4), work, str, cancel=token, grace=0.3)
except BaseException as exc:
    out = {"raised": type(exc).__name__, "at": time.monotonic(), "set": token.is_set(), "seen": seen,
           "reason": token.reason, "signal_name": getattr(exc, "signal_name", None),
           "restored": signal.getsignal(signal.SIGTERM) is before}
print(json.dumps(out), flush=True)
"""


def test_ctrl_c_sets_the_token_and_is_reraised_without_waiting_for_workers():
    """A real SIGINT to a child blocked in on_all (never to pytest itself): KeyboardInterrupt at once."""
    out, sent = signal_child("TERM = False" + BLOCKED_GROUP, signal.SIGINT)
    assert out["raised"] == "KeyboardInterrupt", out
    assert out["at"] - sent < 2.0, out  # the workers block for 60 s; the grace is 0.3 s
    assert out["set"] and out["seen"] == ["interrupted (Ctrl-C)"], out


def test_sigterm_is_named_as_sigterm():
    out, sent = signal_child("TERM = True" + BLOCKED_GROUP, signal.SIGTERM)
    assert out["raised"] == "Interrupted" and out["signal_name"] == "SIGTERM", out
    assert out["reason"] == "interrupted (SIGTERM)" and out["at"] - sent < 2.0, out
    assert out["restored"], "signals_interrupt must give SIGTERM's handler back"
    assert interrupt_reason(KeyboardInterrupt()) == "interrupted (Ctrl-C)"


def test_token_first_reason_wins_and_late_subscribers_are_called_at_once():
    token = CancelToken()
    calls: list[str] = []
    unsubscribe = token.on_set(lambda r: calls.append("early " + r))
    dropped = token.on_set(lambda r: calls.append("dropped " + r))
    dropped()
    assert token.set("first") is True
    assert token.set("second") is False
    token.on_set(lambda r: calls.append("late " + r))
    assert calls == ["early first", "late first"]
    assert token.reason == "first"
    with pytest.raises(Cancelled, match="first"):
        token.check()
    unsubscribe()
