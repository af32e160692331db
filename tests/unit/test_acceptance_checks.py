"""Acceptance and the facts after ready: the pure judges on captured answers, and `up` in memory recording
both (a failed acceptance restoring the previous release is a case of test_memory_scenarios)."""
from __future__ import annotations

import json

import pytest

from orchestrator.acceptance import AcceptContext, AcceptStatus, Answer
from orchestrator.acceptance.checks import judge_greedy, judge_logprobs, judge_tool_call, needle_tokens
from orchestrator.acceptance.charsets import charset, simplified_only
from orchestrator.acceptance.context import previous_greedy
from orchestrator.config.acceptance import AcceptanceSettings
from orchestrator.config.source import ConfigError
from orchestrator.deploy.after_ready import facts, kv_lines
from orchestrator.releases.record import ReleaseOutcome
from orchestrator.releases.store import releases_dir

from memnode.harness import MemCluster
from fakes import deployment

SAMPLES = __import__("pathlib").Path(__file__).parent / "samples"


def answer(body: dict, status: int = 200) -> Answer:
    return Answer.parse(status, json.dumps(body).encode())


def test_logprobs_null_and_nan_are_not_finite():
    nan = Answer.parse(200, b'{"choices":[{"text":"x","logprobs":{"token_logprobs":[-0.5,NaN,null]}}]}')
    got = judge_logprobs("logprobs-finite", nan)
    assert got.status is AcceptStatus.FAIL and got.seen == "2 of 3 logprobs not finite (nan at 1, None at 2)"
    assert judge_logprobs("x", answer({"choices": [{"logprobs": None}]})).status is AcceptStatus.FAIL
    assert "HTTP 500" in judge_logprobs("x", Answer.parse(500, b"boom")).seen


def test_greedy_digest_reports_the_diff_and_fails_only_when_identity_is_expected():
    before = {"digest": "d0", "outputs": {"prose": " a b", "code": " x"}, "release": 4}
    changed = judge_greedy("g", {"prose": " a c", "code": " x"}, before, expect_identical=False)
    assert changed.status is AcceptStatus.CHANGED
    assert "differs from release 4's (d0): prose: was ' a b', now ' a c'" in changed.seen
    assert judge_greedy("g", {"prose": " a c", "code": " x"}, before, True).status is AcceptStatus.FAIL
    assert judge_greedy("g", before["outputs"], before, True).status is AcceptStatus.PASS
    assert "no earlier release" in judge_greedy("g", {"prose": "z"}, None, True).seen


def test_tool_call_as_plain_text_is_named():
    plain = answer({"choices": [{"message": {"content": '<tool_call>{"name": "get_weather"}</tool_call>',
                                             "tool_calls": []}}]})
    result, call = judge_tool_call("tool-call", plain)
    assert call is None and "as plain text" in result.seen


def test_needle_size_comes_from_max_model_len_capped():
    assert needle_tokens(AcceptContext("m", 4096, {})) == 1024
    assert needle_tokens(AcceptContext("m", 262144, {})) == 8192
    assert needle_tokens(AcceptContext("m", 4096, {}, AcceptanceSettings(needle_tokens=9000))) == 3968


def test_charsets_ship_as_data_and_tell_the_scripts_apart():
    assert len(charset("zh_simplified_only")) > 2000 and len(charset("zh_traditional_only")) > 2000
    assert simplified_only("這是繁體中文，这是简体") == ["这", "简", "体"]


def test_facts_after_ready_name_the_node_under_the_reserve():
    idle = (SAMPLES / "meminfo-sim-spark-idle.txt").read_text()
    serving = (SAMPLES / "meminfo-sim-spark-serving-0.7.txt").read_text()
    head_log = ["(EngineCore_DP0 pid=1) INFO 12-04 [kv_cache_utils.py:1291] GPU KV cache size: 372,529 tokens, "
                "Maximum concurrency for 32,768 tokens per request: 11.37x",
                "(Worker pid=2) INFO [gpu_worker.py:391] Available KV cache memory: 52.10 GiB"]
    got = facts({"spark-1": serving, "spark-2": idle, "spark-3": None}, {"spark-1": head_log}, reserve_gib=20.0)
    assert got["nodes"]["spark-1"]["kv_cache_tokens"] == 372529 and got["nodes"]["spark-1"]["max_concurrency"] == 11.37
    assert got["nodes"]["spark-1"]["kv_cache_memory_gib"] == 52.10
    assert got["nodes"]["spark-3"] == {"memory_unread": "no answer"}
    assert got["under_reserve"] == ["spark-1"]  # serving at 0.7 leaves ~12 GiB; idle ~116
    assert kv_lines(["nothing"]) == {}


def test_previous_greedy_skips_failed_releases_and_other_models():
    class R:  # the fields previous_greedy reads
        def __init__(self, id, repo, outcome, outputs):
            self.id, self.outcome = id, outcome
            self.model = type("M", (), {"repo": repo})
            self.acceptance = [{"name": "greedy-digest", "data": {"digest": "d", "outputs": outputs}}]
    releases = [R(5, "m", ReleaseOutcome.FAILED, {"p": "bad"}), R(4, "other", ReleaseOutcome.SUPERSEDED, {"p": "o"}),
                R(3, "m", ReleaseOutcome.SUPERSEDED, {"p": "good"})]
    assert previous_greedy(releases, "m", before=6) == {"digest": "d", "outputs": {"p": "good"}, "release": 3}


def _records(mem: MemCluster) -> dict[int, dict]:
    directory = releases_dir(mem.inventory, "spark-1")
    return {json.loads(t)["id"]: json.loads(t) for p, t in mem.node("spark-1").files.items()
            if p.startswith(directory + "/")}


def seqs(n: int):
    return lambda recipe: recipe["vllm"]["extra"].__setitem__("max-num-seqs", n)


def test_up_records_facts_and_acceptance_and_compares_greedy_outputs(mem):
    mem.up(mem.deployment(seqs(8)))
    mem.up(mem.deployment(seqs(10)))
    mem.up(mem.deployment(seqs(12)), accept=False)
    first, second, third = (_records(mem)[i] for i in (1, 2, 3))
    assert {r["name"]: r["status"] for r in first["acceptance"]} == {
        "logprobs-finite": "pass", "greedy-digest": "pass", "needle": "pass", "tool-call": "skip", "thinking": "skip"}
    greedy = {r["name"]: r for r in second["acceptance"]}["greedy-digest"]
    assert "identical to release 1's" in greedy["seen"]
    nodes = first["after_ready"]["nodes"]
    assert set(nodes) == {"spark-1", "spark-2"} and nodes["spark-1"]["kv_cache_tokens"] == 1228288
    assert nodes["spark-2"]["mem_available_gib"] > 0 and "kv_cache_tokens" not in nodes["spark-2"]
    assert third["acceptance"] == [] and third["after_ready"] is not None  # --no-accept: facts, no checks


def test_an_unknown_check_in_the_recipe_is_bad_input_before_anything_runs(mem, tmp_path):
    dep = mem.deployment(lambda r: r.__setitem__("acceptance", {"checks": ["logprobs-finite", "nope"]}))
    with pytest.raises(ConfigError, match="unknown acceptance check"):
        mem.up(dep)
    dep = mem.deployment(lambda r: r.__setitem__("acceptance", {"advisory": ["langauge"]}))
    with pytest.raises(ConfigError, match="langauge"):
        mem.up(dep)
    assert not any(c for n in mem.world.nodes.values() for c in n.containers.values())
