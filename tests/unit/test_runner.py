"""Issue 7: the Runner runs steps in order and, on any failure or interrupt, undoes in reverse, then raises once."""

from __future__ import annotations


from orchestrator.runner.events import Events, Kind, Outcome, Phase
from orchestrator.runner.runner import Runner, StepFailed
from orchestrator.transport.cancel import Cancelled, Interrupted
from orchestrator.transport.node import NodeError


class Step:
    """A step that records what it did in the shared log; `fail`/`undo_fail` say what to raise."""

    def __init__(self, phase: Phase, log: list, fail: BaseException | None = None,
                 undo_fail: BaseException | None = None):
        self.phase, self.detail, self.log = phase, f"detail of {phase}", log
        self.fail, self.undo_fail = fail, undo_fail
        self.undone = False

    def run(self, ctx) -> None:
        self.log.append(("run", self.phase))
        if self.fail is not None:
            raise self.fail

    def undo(self, ctx) -> None:
        self.log.append(("undo", self.phase))
        if self.undo_fail is not None:
            raise self.undo_fail
        self.undone = True

    def leftover(self, ctx) -> list[str]:
        return [] if self.undone else [f"{self.phase} left something"]


def steps(log: list, *phases: Phase, **special) -> list[Step]:
    """Steps for the phases; special={phase name: dict(fail=..., undo_fail=...)}."""
    return [Step(p, log, **special.get(p.name, {})) for p in phases]


PHASES = (Phase.IMAGE, Phase.SECRETS, Phase.STOP_PREVIOUS, Phase.HEAD, Phase.PEERS)


def run(plan: list[Step]) -> tuple[Events, StepFailed | None]:
    events = Events()
    try:
        Runner(events).run(plan, ctx=object())
    except StepFailed as exc:
        return events, exc
    return events, None


def test_steps_run_in_order_and_nothing_is_undone_on_success():
    log: list = []
    events, error = run(steps(log, *PHASES))
    assert error is None
    assert log == [("run", p) for p in PHASES]
    assert [r.phase for r in events.phases] == list(PHASES)
    assert all(r.outcome is Outcome.OK for r in events.phases)


def test_a_failure_undoes_the_completed_steps_and_the_failing_one_in_reverse():
    log: list = []
    events, error = run(steps(log, *PHASES, HEAD=dict(fail=RuntimeError("docker run failed"))))
    assert log == [("run", p) for p in PHASES[:4]] + [("undo", p) for p in reversed(PHASES[:4])]
    assert ("run", Phase.PEERS) not in log
    assert error.phase is Phase.HEAD
    assert "docker run failed" in error.cause and not error.interrupted
    assert str(error).startswith(f"during {Phase.HEAD}: ")
    assert error.undo_notes == []


def test_a_node_error_names_the_node():
    log: list = []
    _, error = run(steps(log, *PHASES, PEERS=dict(fail=NodeError("spark-2", "docker run failed: no GPU"))))
    assert error.phase is Phase.PEERS and error.nodes == ["spark-2"]
    assert "spark-2" in str(error) and "no GPU" in str(error)


def test_a_failing_undo_is_reported_and_the_rest_still_undo():
    log: list = []
    _, error = run(steps(log, *PHASES, HEAD=dict(fail=RuntimeError("head died")),
                         STOP_PREVIOUS=dict(undo_fail=NodeError("spark-1", "docker start failed"))))
    assert [e for e in log if e[0] == "undo"] == [("undo", p) for p in reversed(PHASES[:4])]
    assert any(f"could not undo {Phase.STOP_PREVIOUS}" in n and "docker start failed" in n for n in error.undo_notes)
    assert f"  {Phase.STOP_PREVIOUS} left something" in error.undo_notes  # its leftover, for the operator
    assert "could not undo" in str(error)  # the one error carries it


def test_ctrl_c_during_a_step_undoes_and_says_interrupted():
    log: list = []
    _, error = run(steps(log, *PHASES, STOP_PREVIOUS=dict(fail=KeyboardInterrupt())))
    assert error.interrupted and error.phase is Phase.STOP_PREVIOUS
    assert error.cause == "interrupted (Ctrl-C)"
    assert [e for e in log if e[0] == "undo"] == [("undo", p) for p in reversed(PHASES[:3])]


def test_sigterm_is_named_as_sigterm_not_ctrl_c():
    log: list = []
    _, error = run(steps(log, *PHASES, SECRETS=dict(fail=Interrupted("SIGTERM"))))
    assert error.interrupted and error.phase is Phase.SECRETS
    assert "SIGTERM" in error.cause and "Ctrl-C" not in str(error)
    assert [e for e in log if e[0] == "undo"] == [("undo", Phase.SECRETS), ("undo", Phase.IMAGE)]
    _, error = run(steps([], *PHASES, IMAGE=dict(fail=Interrupted("SIGINT"))))
    assert error.cause == "interrupted (Ctrl-C)"
    assert isinstance(Interrupted("SIGTERM"), KeyboardInterrupt)  # unwinds every `except Exception`


def test_a_cancelled_transport_counts_as_an_interrupt():
    log: list = []
    _, error = run(steps(log, *PHASES, IMAGE=dict(fail=Cancelled("interrupted (Ctrl-C)"))))
    assert error.interrupted and "Ctrl-C" in error.cause
    assert log == [("run", Phase.IMAGE), ("undo", Phase.IMAGE)]


def test_a_second_interrupt_during_undo_stops_it_and_lists_what_is_left():
    log: list = []
    _, error = run(steps(log, *PHASES, PEERS=dict(fail=KeyboardInterrupt()),
                         HEAD=dict(undo_fail=KeyboardInterrupt())))
    undone = [e for e in log if e[0] == "undo"]
    assert undone == [("undo", Phase.PEERS), ("undo", Phase.HEAD)]  # then it stopped: nothing more was tried
    assert error.undo_notes[0] == "undo interrupted; left as it is:"
    left = error.undo_notes[1:]
    assert left == [f"  {p} left something" for p in (Phase.HEAD, Phase.STOP_PREVIOUS, Phase.SECRETS, Phase.IMAGE)]
    assert f"{Phase.PEERS} left something" not in str(error)  # that one was undone


def test_a_second_interrupt_with_nothing_left_says_so():
    class Clean(Step):
        def leftover(self, ctx) -> list[str]:
            return []

    log: list = []
    plan = [Clean(Phase.IMAGE, log), Clean(Phase.HEAD, log, fail=KeyboardInterrupt(), undo_fail=KeyboardInterrupt())]
    _, error = run(plan)
    assert error.undo_notes == ["undo interrupted; nothing of this run was left"]


def test_phase_events_carry_the_status():
    log: list = []
    events, _ = run(steps(log, Phase.IMAGE, Phase.HEAD, HEAD=dict(fail=RuntimeError("boom"))))
    marks = [(e.kind, e.phase, e.data.get("status")) for e in events.history
             if e.kind in (Kind.PHASE_START, Kind.PHASE_END)]
    assert marks == [
        (Kind.PHASE_START, Phase.IMAGE, None), (Kind.PHASE_END, Phase.IMAGE, "ok"),
        (Kind.PHASE_START, Phase.HEAD, None), (Kind.PHASE_END, Phase.HEAD, "failed"),
        (Kind.PHASE_START, Phase.UNDO, None), (Kind.PHASE_END, Phase.UNDO, "ok"),
    ]
    start = next(e for e in events.history if e.kind is Kind.PHASE_START and e.phase is Phase.IMAGE)
    assert start.data["detail"] == f"detail of {Phase.IMAGE}"
    undo = next(e for e in events.history if e.kind is Kind.PHASE_START and e.phase is Phase.UNDO)
    assert "2 step(s)" in undo.data["detail"] and "boom" in undo.data["detail"]
    assert [(r.phase, r.outcome) for r in events.phases] == [
        (Phase.IMAGE, Outcome.OK), (Phase.HEAD, Outcome.FAILED), (Phase.UNDO, Outcome.OK)]
    assert all(r.seconds >= 0 for r in events.phases)
    assert {e.as_dict()["event"] for e in events.history} == {"phase-start", "phase-end"}


def test_an_undo_that_failed_ends_the_undo_phase_failed():
    log: list = []
    events, _ = run(steps(log, Phase.IMAGE, Phase.HEAD, HEAD=dict(fail=RuntimeError("boom"),
                                                               undo_fail=NodeError("spark-1", "rm failed"))))
    assert events.phases[-1].phase is Phase.UNDO
    assert events.phases[-1].outcome is Outcome.FAILED


def test_a_failure_seen_in_a_wait_names_its_node():
    """A container that dies during a wait (the monitor's FailureSeen) is named in StepFailed.nodes, as a
    NodeError would be: the audit line and --json carry the node, not only the message text."""
    from orchestrator.deploy.watch import Failure, FailureSeen
    from orchestrator.runner.runner import classify

    error = classify(Phase.RENDEZVOUS, FailureSeen(Failure("spark-2", "sd-x-r1 exited with code 1", "")))
    assert error.nodes == ["spark-2"] and error.cause.startswith("spark-2: sd-x-r1 exited with code 1")
