"""ContainerWatch logic with a fake node: resuming a broken log stream, and what a failure reports."""

from __future__ import annotations

import threading

from orchestrator.deploy import watch as watch_mod
from orchestrator.deploy.watch import Monitor
from orchestrator.docker_cli.containers import Container


class FakeNode:
    """Serves scripted `docker logs` streams; records the argv of each call."""

    name = "spark-2"

    def __init__(self, streams: list[list[str]]):
        self.streams, self.calls = list(streams), []

    def stream(self, argv, on_line, stop):
        self.calls.append(list(argv))
        for line in self.streams.pop(0):
            on_line(line)
        return 0


def _state(running: bool, code: int = 0) -> Container:
    return Container("c0ffee", "sd-x-r1", "running" if running else "exited", code, False, "", "sha256:x", {})


def test_a_stream_that_ends_while_the_container_runs_is_followed_again_from_the_last_line(monkeypatch):
    states = iter([_state(True), _state(False, 1)])
    monkeypatch.setattr(watch_mod, "inspect_container", lambda conn, name: next(states))
    node = FakeNode([["2026-12-01T01:00:00.5Z first"],
                     ["2026-12-01T01:00:01.5Z RuntimeError: Assertion error (x/jit/compiler.hpp:147): runtime != nullptr"]])
    monitor = Monitor()
    w = monitor.watch(node, "sd-x-r1")
    w._thread.join(5)
    assert node.calls[1][-3:] == ["--since", "2026-12-01T01:00:00.5Z", "sd-x-r1"]
    assert w.lines == ["first", "RuntimeError: Assertion error (x/jit/compiler.hpp:147): runtime != nullptr"]
    failure = monitor.failure
    assert failure is not None and failure.node == "spark-2"
    assert "exited with code 1 after logging: RuntimeError" in failure.cause
    assert "JIT" in failure.explanation


def test_a_stream_that_keeps_ending_is_a_failure_not_a_busy_loop(monkeypatch):
    monkeypatch.setattr(watch_mod, "inspect_container", lambda conn, name: _state(True))
    node = FakeNode([[] for _ in range(watch_mod.MAX_REFOLLOW + 1)])
    monitor = Monitor()
    monitor.watch(node, "sd-x-r1")._thread.join(5)
    assert len(node.calls) == watch_mod.MAX_REFOLLOW + 1
    assert monitor.failure is not None and "cannot follow the log" in monitor.failure.cause


def test_monitor_call_returns_early_when_a_container_fails():
    monitor = Monitor()
    release = threading.Event()
    threading.Timer(0.1, lambda: monitor.fail(watch_mod.Failure("spark-2", "exited with code 1", ""))).start()
    try:
        monitor.call(lambda: release.wait(30))
    except watch_mod.FailureSeen as exc:
        assert exc.failure.node == "spark-2"
    else:
        raise AssertionError("a blocked probe hid the failure")
    finally:
        release.set()


def test_the_earliest_failure_is_the_cause_even_when_it_is_reported_later():
    """A head killed during load makes the peer log an error too; the peer's report may arrive first."""
    monitor = Monitor()
    monitor.fail(watch_mod.Failure("spark-2", "logged: connection reset by the head", "", at=1000.5))
    monitor.fail(watch_mod.Failure("spark-1", "exited with code 137", "", at=1000.0))  # noticed later, happened first
    try:
        monitor.sleep(5)
    except watch_mod.FailureSeen as exc:
        assert exc.failure.node == "spark-1"
    else:
        raise AssertionError("a failure was not raised")


def test_docker_timestamps_order_like_time():
    early = watch_mod.stamp_seconds("2026-12-01T10:00:00.123456789Z")
    late = watch_mod.stamp_seconds("2026-12-01T10:00:00.2Z")
    assert early is not None and late is not None and 0.07 < late - early < 0.08
    assert watch_mod.stamp_seconds("0001-01-01T00:00:00Z") is None


def test_a_head_whose_log_ended_is_waited_for_even_past_the_settle_time(monkeypatch):
    """CI saw it: the peer's "connection closed" report won because asking the killed head why it ended
    (inspect, earlyoom) took longer than SETTLE. A watch whose log has ended holds the verdict until it
    reports (bounded by SETTLE_MAX)."""
    asked, answer = threading.Event(), threading.Event()

    def slow_inspect(conn, name):
        asked.set()
        answer.wait(10)
        return Container("c0ffee", "sd-x-r0", "exited", 137, False, "2026-12-01T01:00:00.1Z", "sha256:x", {},
                              {"State": {"FinishedAt": "2026-12-01T01:00:00.1Z"}})

    monkeypatch.setattr(watch_mod, "inspect_container", slow_inspect)
    monkeypatch.setattr(watch_mod, "earlyoom_note", lambda conn, code: "")
    head = FakeNode([["2026-12-01T01:00:00.0Z loading"]])
    head.name = "spark-1"
    monitor = Monitor()
    monitor.watch(head, "sd-x-r0")
    assert asked.wait(5)
    peer_at = watch_mod.stamp_seconds("2026-12-01T01:00:00.3Z")
    monitor.fail(watch_mod.Failure("spark-2", "exited with code 1 after logging: recvValue failed", "", at=peer_at))
    threading.Timer(watch_mod.SETTLE * 3, answer.set).start()  # the head's answer comes well after SETTLE
    try:
        monitor.sleep(30)
    except watch_mod.FailureSeen as exc:
        assert exc.failure.node == "spark-1" and "exited with code 137" in exc.failure.cause, exc.failure
    else:
        raise AssertionError("a failure was not raised")


def test_a_rank_that_only_lost_the_head_waits_for_the_cause_and_yields_to_it():
    """earlyoom SIGTERMs the head: its store closes at once and the peer exits 1 seconds before the head is
    SIGKILLed. The peer's failure (secondary) is not raised alone while the head may still report; the
    head's kill, later in time, is named as the cause."""
    monitor = Monitor()
    monitor.watches = {"spark-1": object(), "spark-2": object()}  # two ranks watched
    monitor.fail(watch_mod.Failure("spark-2", "sd-x-r1 exited with code 1", "lost the head", at=100.0, secondary=True))
    head = watch_mod.Failure("spark-1", "sd-x-r0 exited with code 137", "killed by SIGKILL", at=102.5)
    threading.Timer(watch_mod.SETTLE * 4, lambda: monitor.fail(head)).start()  # well past SETTLE
    try:
        monitor.sleep(30)
    except watch_mod.FailureSeen as exc:
        assert exc.failure is head, exc.failure
    else:
        raise AssertionError("no failure was raised")


def test_a_lone_secondary_failure_is_raised_within_the_bound():
    monitor = Monitor()
    monitor.watches = {"spark-1": object(), "spark-2": object()}
    peer = watch_mod.Failure("spark-2", "sd-x-r1 exited with code 1", "lost the head", secondary=True)
    monitor.fail(peer)
    monitor._first_report -= watch_mod.SETTLE_MAX  # as if the bound had passed: no cause came
    try:
        monitor.check()
    except watch_mod.FailureSeen as exc:
        assert exc.failure is peer
    else:
        raise AssertionError("the bound did not end the wait")


def test_the_peer_lost_line_marks_a_consequence():
    from orchestrator.deploy.signatures import consequence

    assert consequence(["(Worker_TP1 pid=7) ERROR 12-03 11:42:54 [TCPStore.cpp:122] [c10d] recvValue failed on "
                        "SocketImpl: Failed to recv, got 0 bytes. Connection was likely closed. Did the remote "
                        "server shutdown or crash?"])
    assert not consequence(["RuntimeError: Assertion error (x/jit/compiler.hpp:147): runtime != nullptr"])


def test_a_root_cause_on_the_other_stream_wins_over_the_wrapper_that_arrived_first(monkeypatch):
    """vLLM's worker writes its ValueError to stdout and the API server its "See root cause above" to stderr:
    `docker logs` may hand over the wrapper first (seen in CI). The report names the root cause."""
    monkeypatch.setattr(watch_mod, "inspect_container", lambda conn, name: _state(False, 1))
    node = FakeNode([[
        "2026-12-01T01:00:01.2Z (APIServer pid=7) RuntimeError: Engine core initialization failed. See root cause above.",
        "2026-12-01T01:00:01.1Z (Worker pid=9) ValueError: Free memory on device cuda:0 (11.90/119.70 GiB) on startup "
        "is less than desired GPU memory utilization (0.7, 83.79 GiB). Decrease GPU memory utilization",
    ]])
    monitor = Monitor()
    monitor.watch(node, "sd-x-r1")._thread.join(5)
    failure = monitor.failure
    assert failure is not None and "after logging: (Worker pid=9) ValueError: Free memory" in failure.cause
    assert failure.explanation.startswith("less memory was free than its gpu_memory_utilization share")


def test_a_wrapper_alone_still_explains_the_failure(monkeypatch):
    monkeypatch.setattr(watch_mod, "inspect_container", lambda conn, name: _state(False, 1))
    node = FakeNode([["2026-12-01T01:00:01.2Z RuntimeError: Engine core initialization failed. See root cause above."]])
    monitor = Monitor()
    monitor.watch(node, "sd-x-r1")._thread.join(5)
    assert monitor.failure is not None and monitor.failure.explanation == "the engine failed to start"


def test_stopping_the_monitor_tells_every_watch_and_helper_before_waiting_for_any():
    """Each watch ends with a kill round trip to its node: told all at once, those overlap (the end of `up`)."""
    calls: list[str] = []

    class Part:
        def __init__(self, name: str):
            self.name, self.container = name, name

        def signal(self) -> None:
            calls.append(f"signal {self.name}")

        def stop(self) -> None:
            calls.append(f"stop {self.name}")

    monitor = Monitor()
    monitor.watches = {"spark-1": Part("w1"), "spark-2": Part("w2")}
    monitor.helpers = [Part("alive")]
    monitor.stop(["w2"])
    assert calls == ["signal w2", "stop w2"]
    calls.clear()
    monitor.stop()
    assert calls == ["signal w1", "signal w2", "signal alive", "stop w1", "stop w2", "stop alive"]


def test_a_log_line_that_comes_sooner_than_the_recheck_minimum_still_wakes_the_wait():
    """The last line of a burst ("Application startup complete" right after the server listens) may come
    within MIN_RECHECK of the previous wake: the wait re-checks once that minimum has passed, not at the end
    of its interval (up's /health poll: 0.5 s later on most runs)."""
    import time

    monitor = Monitor()
    threading.Timer(0.01, monitor.activity).start()  # well within MIN_RECHECK of the sleep's start
    started = time.monotonic()
    monitor.sleep(3600)  # returns only because the line woke it (else the unit timeout fails the test)
    assert time.monotonic() - started >= watch_mod.MIN_RECHECK


def test_a_wait_with_no_line_sleeps_its_interval():
    import time

    monitor = Monitor()
    started = time.monotonic()
    monitor.sleep(0.3)
    assert time.monotonic() - started >= 0.3
