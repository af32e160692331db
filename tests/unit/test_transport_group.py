"""The node group and the cancel token with fake callables: failures collected, cancel and Ctrl-C return
promptly although workers block, workers get their grace to clean up, SIGTERM is named as SIGTERM."""

from __future__ import annotations

import os
import signal
import threading
import time

import pytest

from orchestrator.transport.cancel import Cancelled, CancelToken, Interrupted, interrupt_reason, signals_interrupt
from orchestrator.transport.group import GroupError, on_all


def _signal_soon(sig: int, delay: float) -> threading.Timer:
    """Deliver a real signal to this process (Python runs the handler in the main thread)."""
    timer = threading.Timer(delay, os.kill, args=(os.getpid(), sig))
    timer.start()
    return timer


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
    assert time.monotonic() - started < 2.0
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


def test_ctrl_c_sets_the_token_and_is_reraised_without_waiting_for_workers():
    token = CancelToken()
    never = threading.Event()
    seen: list[str] = []
    token.on_set(seen.append)
    _signal_soon(signal.SIGINT, 0.3)
    started = time.monotonic()
    with pytest.raises(KeyboardInterrupt):
        on_all(range(4), lambda n: never.wait(60), str, cancel=token, grace=0.3)
    assert time.monotonic() - started < 2.0
    assert token.is_set() and seen == ["interrupted (Ctrl-C)"]
    never.set()


def test_sigterm_is_named_as_sigterm():
    token = CancelToken()
    never = threading.Event()
    before = signal.getsignal(signal.SIGTERM)
    with signals_interrupt():
        _signal_soon(signal.SIGTERM, 0.2)
        with pytest.raises(Interrupted) as caught:
            on_all(range(2), lambda n: never.wait(60), str, cancel=token, grace=0.2)
    assert caught.value.signal_name == "SIGTERM"
    assert token.reason == "interrupted (SIGTERM)"
    assert interrupt_reason(KeyboardInterrupt()) == "interrupted (Ctrl-C)"
    assert signal.getsignal(signal.SIGTERM) is before  # restored
    never.set()


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
