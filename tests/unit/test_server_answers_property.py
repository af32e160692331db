"""Malformed answers from a server never become an internal error (issue 35): every parser of what an API
answers — the acceptance checks, readiness and `status`'s reads of the OpenAI API, `watch`'s probe and
/metrics, bench's SSE events, usage and /tokenize, the Hub download's outcome line — is fed random JSON
shapes (and random text where the answer is text). The only exception allowed out is the module's own
documented error type; a TypeError, KeyError, AttributeError... is a bug this test finds.

The shapes are drawn with the keys these parsers read, so nested wrong types (`choices: [12]`,
`message: "x"`, `usage: {"completion_tokens": "7"}`) come up, not only random dictionaries."""

from __future__ import annotations

import json
import re

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.acceptance import AcceptContext, AcceptStatus, Answer
from orchestrator.acceptance.registry import CHECKS
from orchestrator.acceptance.run import InTurn, drive
from orchestrator.bench.client import Api, RequestFailed, Streamed, read_event
from orchestrator.bench.metrics import MetricsError, parse as parse_metrics
from orchestrator.config.acceptance import AcceptanceSettings
from orchestrator.deploy.readiness import completes, model_listed
from orchestrator.deploy.waits import Seen
from orchestrator.http_api.endpoint import ApiError, completion_answer, model_ids
from orchestrator.model.download import DownloadFailed, parse_outcome
from orchestrator.watching.sample import engine_facts

KEYS = ["choices", "text", "logprobs", "token_logprobs", "message", "content", "tool_calls", "function",
        "arguments", "name", "id", "reasoning", "reasoning_content", "data", "usage", "completion_tokens",
        "prompt_tokens", "prompt_tokens_details", "cached_tokens", "delta", "finish_reason", "error", "ok",
        "commit", "tries", "kind", "file", "count"]
SCALARS = (st.none() | st.booleans() | st.integers(-2**40, 2**40) | st.floats() | st.text(max_size=8)
           | st.sampled_from(["NaN", "get_weather", '{"city": "Taipei"}', "violet-4821", "22"]))
JSON = st.recursive(SCALARS, lambda inner: st.lists(inner, max_size=3)
                    | st.dictionaries(st.sampled_from(KEYS) | st.text(max_size=4), inner, max_size=4),
                    max_leaves=12)
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
FAST = settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def encoded(value) -> bytes:
    return json.dumps(value).encode()


class Answers:
    """An Endpoint whose every answer is drawn: status 200 and a random JSON body (or text for /metrics)."""

    def __init__(self, data):
        self.data = data
        self.url = "http://127.0.0.1:1"

    def request(self, method, path, body=None, timeout=5.0):
        if path == "/metrics":
            return 200, self.data.draw(st.text(max_size=40)).encode()
        return 200, encoded(self.data.draw(JSON))

    def healthy(self, timeout=2.0):
        return True

    def complete(self, model, prompt, max_tokens=8, timeout=30.0):
        from orchestrator.http_api.endpoint import Endpoint
        return Endpoint.complete(self, model, prompt, max_tokens, timeout)


CONTEXT = AcceptContext("m", 1024, {"tool-call-parser": "hermes", "enable-auto-tool-choice": True,
                                    "reasoning-parser": "qwen3"}, AcceptanceSettings())


@pytest.mark.parametrize("name", sorted(CHECKS))
@FAST
@given(data=st.data())
def test_every_acceptance_check_judges_any_json_as_a_result(name, data):
    result = drive(name, CHECKS[name].exchange(CONTEXT), InTurn(Answers(data)))  # draws: one thread
    assert result.name == name and result.status in (AcceptStatus.PASS, AcceptStatus.FAIL, AcceptStatus.CHANGED)
    assert not CONTROL.search(result.seen), result.seen


@FAST
@given(raw=st.binary(max_size=40) | JSON.map(encoded), status=st.sampled_from([200, 500]))
def test_an_answer_of_any_bytes_is_described_without_control_characters(raw, status):
    answer = Answer.parse(status, raw)
    assert answer.body is None or isinstance(answer.body, dict)
    assert not CONTROL.search(answer.excerpt()) and not CONTROL.search(answer.problem() or "")

    class Raw:  # readiness (`up`, `status`) shows what the server said as well
        def request(self, method, path, body=None, timeout=5.0):
            return status, raw
    for seen in (model_listed(Raw(), "m"), completes(Raw(), "m", "spark-1", {})):
        assert not CONTROL.search(seen.what), seen.what


@FAST
@given(value=JSON)
def test_the_openai_api_readers_raise_only_api_error(value):
    for parse in (model_ids, completion_answer):
        try:
            got = parse(encoded(value))
        except ApiError:
            continue
        if parse is model_ids:
            assert all(isinstance(i, str) for i in got)
        else:
            assert isinstance(got["choices"][0]["text"], str)


@FAST
@given(data=st.data())
def test_readiness_reads_any_answer_as_seen_or_not(data):
    assert isinstance(model_listed(Answers(data), "m"), Seen)
    answer: dict = {}
    seen = completes(Answers(data), "m", "spark-1", answer)
    assert isinstance(seen, Seen) and (not seen.ok or isinstance(answer["choices"][0]["text"], str))


@FAST
@given(data=st.data())
def test_watch_probe_and_metrics_never_raise(data):
    engine = engine_facts(Answers(data), "m", window=0)
    assert engine.probed and isinstance(engine.probe, str)


@FAST
@given(text=st.text(max_size=60) | st.sampled_from(["vllm:x 1\n", "# TYPE a counter\na_total{b=\"1\"} x\n"]))
def test_metrics_text_raises_only_metrics_error(text):
    try:
        parse_metrics(text)
    except MetricsError:
        pass


@FAST
@given(events=st.lists(JSON, max_size=4), api=st.sampled_from(list(Api)))
def test_bench_stream_events_raise_only_request_failed_and_usage_reads_as_counts(events, api):
    got = Streamed(t_sent=0)
    try:
        for i, event in enumerate(events):
            read_event(api, json.dumps(event), got, i + 1)
    except RequestFailed:
        return
    for count in (got.completion_tokens, got.prompt_tokens, got.cached_tokens):
        assert count is None or (isinstance(count, int) and not isinstance(count, bool))
    assert isinstance(got.text, str)


@FAST
@given(value=JSON)
def test_the_hub_download_outcome_raises_only_download_failed(value):
    try:
        done = parse_outcome("spark-1", "org/model", "progress\n\x1eSDPULL " + json.dumps(value) + "\n")
    except DownloadFailed:
        return
    assert isinstance(done.commit, str) and done.commit and isinstance(done.tries, int)
