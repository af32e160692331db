"""Acceptance 3 of issue 12 and the rest of the protocol: the provisional headline, --until-stable,
concurrency levels, TTFT cold/warm, the report files and bad input. Real stand-in, the real CLI."""

from __future__ import annotations

import json

import pytest
from bench_helpers import bench_cli

from orchestrator.sim.standin.speed import expected

pytestmark = pytest.mark.timing  # judged on wall-clock rates: scripts/test runs it alone (pyproject)


def test_five_shots_with_a_wide_spread_are_provisional_with_advice(standin):
    srv = standin(spec_k=4, env={"SIM_DECODE_TPS": "400", "SIM_ACCEPT": "code=2.0:0.8:0.9"})
    code, data, text = bench_cli("--url", srv.url, "--profile", "code", "--shots", "5", "--warmup", "0",
                                 "--max-tokens", "300", "--json")
    assert code == 0, text
    head = data["groups"][0]["decode_tps"]
    assert head["n"] == 5
    assert head["spread"] > 0.15, f"precondition: the stand-in should spread > 15% here ({head})"
    assert head["provisional"] is True and data["headline"]["code"]["provisional"] is True
    need = int(head["advice"].split("take ")[1].split(" shots")[0])
    assert need >= 10 and f"--shots {need}" in head["advice"]


def test_a_narrow_spread_is_a_final_headline_and_until_stable_stops_early(standin):
    srv = standin(env={"SIM_DECODE_TPS": "400"})
    code, data, text = bench_cli("--url", srv.url, "--profile", "prose", "--shots", "1", "--until-stable", "3%",
                                 "--max-shots", "20", "--warmup", "0", "--max-tokens", "100", "--json")
    assert code == 0, text
    g = data["groups"][0]
    assert g["decode_tps"]["provisional"] is False
    lo, hi = g["decode_tps"]["ci95"]
    assert (hi - lo) / g["decode_tps"]["median"] <= 0.03
    assert 6 <= g["kept"] < 20 and g["stopped"] is None  # 6: the fewest shots a 95% CI needs


def test_until_stable_is_bounded_by_max_shots_and_says_so(standin):
    srv = standin(spec_k=4, env={"SIM_DECODE_TPS": "800", "SIM_ACCEPT": "code=2.0:0.8:0.9"})
    code, data, text = bench_cli("--url", srv.url, "--profile", "code", "--until-stable", "0.001",
                                 "--max-shots", "7", "--shots", "1", "--warmup", "0", "--max-tokens", "60", "--json")
    assert code == 0, text
    g = data["groups"][0]
    assert g["kept"] == 7 and "--max-shots 7 reached" in g["stopped"]


def test_concurrency_aggregate_and_per_request(standin):
    srv = standin(env={"SIM_DECODE_TPS": "300"})
    code, data, text = bench_cli("--url", srv.url, "--profile", "prose", "--shots", "3", "--warmup", "0",
                                 "--max-tokens", "150", "--concurrency", "1,4", "--json")
    assert code == 0, text
    by_c = {g["concurrency"]: g for g in data["groups"]}
    want = expected(srv.truth, "prose", k=0, batch=4)
    assert by_c[4]["decode_tps"]["median"] == pytest.approx(want.decode_tps, rel=0.05)
    assert by_c[4]["aggregate_tps"]["median"] == pytest.approx(want.aggregate_tps, rel=0.05)
    assert by_c[1]["decode_tps"]["median"] == pytest.approx(300, rel=0.03)
    assert by_c[4]["aggregate_tps"]["median"] > 2 * by_c[1]["decode_tps"]["median"]  # grows, sublinearly
    assert by_c[4]["aggregate_tps"]["median"] < 4 * by_c[1]["decode_tps"]["median"]


def test_ttft_cold_and_warm_and_the_report_files(standin, tmp_path):
    srv = standin(env={"SIM_DECODE_TPS": "500", "SIM_PREFILL_TPS": "2000"})
    prompts = tmp_path / "long.txt"
    prompts.write_text(" ".join(f"word{i}" for i in range(600)) + "\n")
    code, data, text = bench_cli("--url", srv.url, "--prompts", str(prompts), "--shots", "2", "--warmup", "0",
                                 "--max-tokens", "30", "--report", str(tmp_path / "rep"), "--json")
    assert code == 0, text
    g = data["groups"][0]
    assert g["profile"] == "long"
    cold, warm = g["ttft_cold_s"]["median"], g["ttft_warm"]
    assert warm["cached_tokens"] > 500 and warm["ttft_s"] < cold / 2
    saved = json.loads((tmp_path / "rep" / "bench.json").read_text())
    assert saved["groups"][0]["kept"] == 2
    png = (tmp_path / "rep" / "bench.png")
    try:
        import matplotlib  # noqa: F401
    except ImportError:
        assert not png.exists() and "matplotlib is not installed" in text
    else:
        assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


@pytest.mark.parametrize("args, message", [
    ([], "give one of: a RECIPE"),
    (["--url", "http://127.0.0.1:9", "--concurrency", "1,x"], "--concurrency '1,x'"),
    (["--url", "http://127.0.0.1:9", "--until-stable", "150%"], "between 0 and 1"),
    (["--url", "http://127.0.0.1:9", "--profile", "poetry"], "unknown profile 'poetry'"),
    (["--url", "http://127.0.0.1:9", "--prompts", "/nonexistent/p.txt"], "no such file"),
    (["--url", "http://127.0.0.1:9", "--api", "grpc"], "choose chat or completions"),
])
def test_bad_input_exits_2_with_a_message(args, message):
    code, _, text = bench_cli(*args)
    assert code == 2 and message in text, text


def test_unreachable_server_is_a_failure_exit_1():
    code, _, text = bench_cli("--url", "http://127.0.0.1:9", "--profile", "chat", "--shots", "1")
    assert code == 1 and "127.0.0.1:9" in text, text
