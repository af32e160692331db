"""An interrupted bench keeps the shots it took: runner.run fills the caller's list group by group, the group
cut short says so, and the record (`history`) says interrupted with the figures of those shots. The shots are
constructed results (no server); the interrupt is the real exception the signal handler raises."""

from __future__ import annotations

import pytest

from orchestrator.bench import metrics as m
from orchestrator.bench import runner
from orchestrator.bench.record import headline_text, summary
from orchestrator.bench.report import BenchResult
from orchestrator.bench.shot import RequestResult
from orchestrator.interrupts import Interrupted, interrupt_reason


def _shooter(interrupt_at: int):
    calls = []

    def take(http, model, shot, prompts, opts):
        calls.append(shot)
        if len(calls) == interrupt_at:
            raise Interrupted("SIGTERM")
        shot.requests = [RequestResult(ttft_s=0.1, completion_tokens=801, first_chunk_tokens=1, decode_s=20.0,
                                       content_chunks=200, cached_tokens=0, prompt_tokens=40, t_first_ns=1,
                                       t_last_ns=2)]
        shot.delta = m.Delta(success=1)
        return shot
    return take


@pytest.fixture
def plan(monkeypatch):
    monkeypatch.setattr(runner, "warm_probe", lambda *a: runner.WarmProbe(None, None, None, "not asked"))
    return runner.Plan(prompts={"code": ["p1", "p2"], "zh": ["p3"]}, shots=3, warmup=1)


def test_the_shots_before_the_interrupt_stay_in_the_callers_groups(monkeypatch, plan):
    monkeypatch.setattr(runner, "take", _shooter(interrupt_at=7))  # code: 1 warm-up + 3; zh: 1 + 1, then cut
    taken: list[runner.Group] = []
    with pytest.raises(Interrupted) as caught:
        runner.run(None, "m", plan, groups=taken)
    groups = runner.interrupted(taken, interrupt_reason(caught.value))
    assert [(g.profile, len(g.kept), len(g.shots)) for g in groups] == [("code", 3, 4), ("zh", 1, 2)]
    assert groups[0].stopped == "" and groups[1].stopped == "interrupted (SIGTERM) after 1 kept shot(s)"

    result = BenchResult(target={}, plan=plan, groups=groups, interrupted="interrupted (SIGTERM)")
    recorded = summary(result)
    assert recorded["interrupted"] == "interrupted (SIGTERM)" and recorded["headline"]["zh"]["shots"] == 1
    assert [g["kept"] for g in recorded["groups"]] == [3, 1]
    assert headline_text(recorded) == "code 40.0, zh 40.0 (interrupted)"
    assert result.as_dict()["interrupted"] == "interrupted (SIGTERM)"


def test_an_interrupt_before_any_shot_leaves_no_group(monkeypatch, plan):
    monkeypatch.setattr(runner, "take", _shooter(interrupt_at=1))
    taken: list[runner.Group] = []
    with pytest.raises(KeyboardInterrupt):
        runner.run(None, "m", plan, groups=taken)
    assert runner.interrupted(taken, "interrupted (Ctrl-C)") == []


def test_a_whole_run_is_not_marked(monkeypatch, plan):
    monkeypatch.setattr(runner, "take", _shooter(interrupt_at=0))
    groups = runner.run(None, "m", plan)
    assert [len(g.kept) for g in groups] == [3, 3] and not any(g.stopped for g in groups)
    assert "interrupted" not in headline_text(summary(BenchResult(target={}, plan=plan, groups=groups)))
