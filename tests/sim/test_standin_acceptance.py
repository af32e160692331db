"""The acceptance checks against a real stand-in process on loopback: each passes on a healthy server and
fails, naming what it saw, under the stand-in fault that breaks it (docs/acceptance.md)."""
from __future__ import annotations

import pytest

from orchestrator.acceptance import AcceptContext, AcceptStatus, run_checks
from orchestrator.config.acceptance import AcceptanceSettings
from orchestrator.http_api.endpoint import Endpoint
from orchestrator.sim.standin.local import LocalStandin

FLAGS = {"enable-auto-tool-choice": True, "tool-call-parser": "hermes", "reasoning-parser": "deepseek_r1"}
EXTRA = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes", "--reasoning-parser", "deepseek_r1")
ALL = ["logprobs-finite", "greedy-digest", "needle", "tool-call", "language", "thinking"]
FAST = {"SIM_DECODE_TPS": "2000", "SIM_PREFILL_TPS": "200000", "SIM_TTFT": "0"}


def results(srv: LocalStandin, previous=None, **settings) -> dict:
    ctx = AcceptContext("tiny", 4096, FLAGS, AcceptanceSettings(checks=ALL, **settings), previous)
    return {r.name: r for r in run_checks(Endpoint("127.0.0.1", srv.port), ctx)}


@pytest.fixture(scope="module")
def healthy():
    with LocalStandin(env=FAST, extra=EXTRA, max_model_len=4096) as srv:
        yield srv


def test_healthy_standin_passes_every_check(healthy):
    got = results(healthy)
    assert {n: r.status for n, r in got.items()} == {n: AcceptStatus.PASS for n in ALL}, got
    assert "violet-4821" in got["needle"].seen
    again = results(healthy, previous={**got["greedy-digest"].data, "release": 1})
    assert again["greedy-digest"].status is AcceptStatus.PASS and "identical to release 1" in again["greedy-digest"].seen


def test_each_fault_fails_its_check(healthy):
    before = results(healthy)["greedy-digest"].data
    faults = {"SIM_FAULT_LOGPROBS_NAN": "1", "SIM_FAULT_FORGET_BEYOND": "200", "SIM_FAULT_TOOL_PLAIN": "1",
              "SIM_FAULT_SIMPLIFIED": "1", "SIM_FAULT_REASONING_INLINE": "1", "SIM_FAULT_PERTURB": "1"}
    with LocalStandin(env={**FAST, **faults}, extra=EXTRA, max_model_len=4096) as srv:
        got = results(srv, previous={**before, "release": 3})
        strict = results(srv, previous={**before, "release": 3}, expect_identical=True)
    assert {n: r.status for n, r in got.items()} == {
        "logprobs-finite": AcceptStatus.FAIL, "greedy-digest": AcceptStatus.CHANGED, "needle": AcceptStatus.FAIL,
        "tool-call": AcceptStatus.FAIL, "language": AcceptStatus.FAIL, "thinking": AcceptStatus.FAIL}, got
    assert "not finite (nan at 0" in got["logprobs-finite"].seen
    assert "was not retrieved" in got["needle"].seen
    assert "as plain text" in got["tool-call"].seen
    assert "Simplified-only characters" in got["language"].seen
    assert "inside content" in got["thinking"].seen
    assert "differs from release 3's" in got["greedy-digest"].seen and "prose: was" in got["greedy-digest"].seen
    assert strict["greedy-digest"].status is AcceptStatus.FAIL


def test_tool_choice_without_the_flags_is_refused_and_the_check_does_not_apply():
    with LocalStandin(env=FAST, max_model_len=4096) as srv:
        ctx = AcceptContext("tiny", 4096, {}, AcceptanceSettings(checks=["tool-call", "thinking"]))
        got = {r.name: r for r in run_checks(Endpoint("127.0.0.1", srv.port), ctx)}
        status, body = Endpoint("127.0.0.1", srv.port).request("POST", "/v1/chat/completions", {
            "messages": [{"role": "user", "content": "hi"}], "tools": [{"type": "function", "function": {"name": "f"}}]})
    assert got["tool-call"].status is AcceptStatus.SKIP and "no tool parser" in got["tool-call"].seen
    assert got["thinking"].status is AcceptStatus.SKIP
    assert status == 400 and b"--enable-auto-tool-choice" in body
