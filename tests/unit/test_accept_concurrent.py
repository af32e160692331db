"""The acceptance checks run at once: every check's first request (greedy-digest's two prompts included) is in
flight before any is answered, and each check's verdict and message are those it gives when driven alone,
one request after another. An endpoint in memory answers; a Barrier holds the first requests until all of
them have arrived, so a run that sends them one by one never gets past the first (no timing is measured)."""
from __future__ import annotations

import json
import threading

import pytest

from orchestrator.acceptance import AcceptContext, AcceptStatus, blocking, run_checks
from orchestrator.acceptance.model import Request
from orchestrator.acceptance.checks import GREEDY_PROMPTS, ZH_HANT_ASK
from orchestrator.acceptance.run import InTurn, Sender, drive, one, plan
from orchestrator.config.acceptance import AcceptanceSettings, CustomCheck

FLAGS = {"tool-call-parser": "hermes", "enable-auto-tool-choice": True, "reasoning-parser": "qwen3"}
ALL = ["logprobs-finite", "greedy-digest", "needle", "tool-call", "language", "thinking"]
OWN = CustomCheck(name="capital", prompt="What is the capital of Taiwan?", expect="Taipei")
CTX = AcceptContext("m", 1024, FLAGS, AcceptanceSettings(checks=ALL, custom=[OWN]))
FIRST_ROUND = 7  # greedy 2 (together; logprobs-finite's is greedy's prose request, sent once), needle 1,
# tool-call 1 (its round trip comes after), language, thinking and the recipe's own 1 each


def answer_to(path: str, body: dict, nan: bool = False) -> dict:
    """A well-behaved server's answer to each check's request (NaN logprobs when asked to misbehave)."""
    if path == "/v1/completions":
        prompt = body["prompt"]
        if "pass phrase" in prompt:
            return {"choices": [{"text": " violet-4821."}]}
        choice = {"text": f" after {prompt[:12]!r}"}
        if body.get("logprobs"):
            choice["logprobs"] = {"token_logprobs": [-0.5, float("nan")] if nan else [-0.5, -0.25]}
        return {"choices": [choice]}
    messages = body["messages"]
    ask = messages[0]["content"]
    if messages[-1]["role"] == "tool":
        return {"choices": [{"message": {"content": "It is 22 C and sunny in Taipei."}}]}
    if body.get("tools"):
        call = {"id": "c1", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Taipei"}'}}
        return {"choices": [{"message": {"content": None, "tool_calls": [call]}}]}
    if ask == ZH_HANT_ASK:
        return {"choices": [{"message": {"content": "今天天氣很好，陽光普照。"}}]}
    if "17 + 25" in ask:
        return {"choices": [{"message": {"reasoning_content": "17 + 25 = 42", "content": "42"}}]}
    return {"choices": [{"message": {"content": "Taipei"}}]}


class Server:
    """Endpoint's `request`, in memory; with `hold`, its first `hold` requests wait for one another."""

    url = "http://127.0.0.1:8000"

    def __init__(self, hold: int = 0, nan: bool = False, guard: float = 20.0):
        # the timeout only turns a run that never sends them together into a failure instead of a hang
        self.barrier = threading.Barrier(hold, timeout=guard) if hold else None
        self.nan, self.lock, self.arrived, self.in_flight, self.most = nan, threading.Lock(), 0, 0, 0
        self.bodies: list[dict] = []

    def request(self, method: str, path: str, body: dict | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
        with self.lock:
            self.arrived += 1
            self.bodies.append(body or {})
            self.in_flight += 1
            self.most = max(self.most, self.in_flight)
            held = self.barrier is not None and self.arrived <= self.barrier.parties
        try:
            if held:
                self.barrier.wait()
            return 200, json.dumps(answer_to(path, body or {}, self.nan)).encode()
        finally:
            with self.lock:
                self.in_flight -= 1


def alone(ctx: AcceptContext, server: Server) -> list[dict]:
    """Each check driven by itself, in order, one request at a time, nothing shared: the verdicts to keep."""
    out = []
    for name, check in plan(ctx):
        if name == "greedy-digest":  # its two prompts in turn
            out.append(drive(name, check.exchange(ctx), InTurn(server)).as_dict())
        else:
            out.append(one(name, check, ctx, InTurn(server)).as_dict())
    return out


def test_every_checks_first_request_is_in_flight_before_any_is_answered():
    server = Server(hold=FIRST_ROUND)
    said = []
    results = run_checks(server, CTX, on_result=lambda r: said.append(r.name))
    assert server.most >= FIRST_ROUND and not server.barrier.broken
    assert said == [r.name for r in results] == [*ALL, "capital"]  # reported in the plan's order
    assert {r.name: r.status for r in results} == {n: AcceptStatus.PASS for n in [*ALL, "capital"]}, results


def test_one_request_at_a_time_is_what_the_barrier_refuses():
    """The test above can fail: the same server, asked in turn, breaks its barrier at the first request."""
    server = Server(hold=FIRST_ROUND, guard=0.5)
    with pytest.raises(threading.BrokenBarrierError):
        alone(CTX, server)


@pytest.mark.parametrize("nan", [False, True])
def test_verdicts_and_messages_are_those_of_each_check_alone(nan):
    together = [r.as_dict() for r in run_checks(Server(nan=nan), CTX)]
    assert together == alone(CTX, Server(nan=nan))
    failed = blocking(run_checks(Server(nan=nan), CTX))
    assert [(r.name, r.seen) for r in failed] == ([("logprobs-finite", "1 of 2 logprobs not finite (nan at 1)")]
                                                  if nan else [])


def test_greedy_digest_sends_its_two_prompts_together_and_keeps_their_order():
    server = Server(hold=2)
    ctx = AcceptContext("m", 1024, {}, AcceptanceSettings(checks=["greedy-digest"]))
    result = run_checks(server, ctx)[0]
    assert result.status is AcceptStatus.PASS and list(result.data["outputs"]) == ["prose", "code"]
    assert result.data["outputs"]["code"] == " after 'def add(a, b'"


def test_a_request_two_checks_ask_is_sent_once_and_both_judge_its_answer():
    server = Server(nan=True)
    ctx = AcceptContext("m", 1024, {}, AcceptanceSettings(checks=["logprobs-finite", "greedy-digest"]))
    results = run_checks(server, ctx)
    prompts = [b["prompt"] for b in server.bodies]
    assert sorted(prompts) == sorted(GREEDY_PROMPTS.values())  # the prose prompt once, not twice
    assert results[0].status is AcceptStatus.FAIL and results[1].data["outputs"]["prose"] == " after 'Two nodes jo'"


def test_requests_that_differ_are_each_sent():
    server = Server()
    sender = Sender(server)
    a, b = (Request("POST", "/v1/completions", {"prompt": p, "max_tokens": 1}) for p in ("x", "y"))
    sender.together([a, b, a])
    assert sorted(body["prompt"] for body in server.bodies) == ["x", "y"]
