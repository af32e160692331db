"""Acceptance 2 of issue 12: a shot polluted by a concurrent request, or served from the prefix cache,
or taken while the server is busy, is discarded and reported, never averaged. Real stand-in, real HTTP.
"""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from bench_helpers import bench_cli

from orchestrator.bench import metrics as m
from orchestrator.bench.client import Api, open_client, stream
from orchestrator.bench.shot import Discard, Shot, ShotOptions, fresh_prompt, take

pytestmark = pytest.mark.timing  # judged on wall-clock rates: scripts/test runs it alone (pyproject)

LONG = "Explain how a lighthouse works, the lens, the lamp and the keeper's duties, in detail. " * 4


def _wait_running(url: str, want: float, bound_s: float = 20.0) -> bool:
    deadline = time.monotonic() + bound_s
    with httpx.Client(base_url=url) as http:
        while time.monotonic() < deadline:
            if (m.scrape(http).get(m.RUNNING) or 0) >= want:
                return True
            time.sleep(0.005)
    return False


def _foreign(url: str, max_tokens: int) -> threading.Thread:
    """Someone else's request, on its own connection."""
    def go() -> None:
        with open_client(url) as http:
            stream(http, Api.COMPLETIONS, "tiny", fresh_prompt("Someone else asks something."), max_tokens)
    t = threading.Thread(target=go, daemon=True)
    t.start()
    return t


def test_a_concurrent_request_pollutes_the_shot(standin):
    srv = standin(env={"SIM_DECODE_TPS": "200"})
    opts = ShotOptions(api=Api.CHAT, max_tokens=200)
    shot = Shot(index=0, profile="prose", concurrency=1, prompt_id=0)
    done = threading.Thread(target=lambda: take(open_client(srv.url), "tiny", shot, [fresh_prompt(LONG)], opts))
    done.start()
    assert _wait_running(srv.url, 1)
    _foreign(srv.url, max_tokens=5).join(30)  # starts and ends inside our 1 s shot
    done.join(60)
    assert shot.discarded is Discard.POLLUTED, (shot.discarded, shot.why)
    assert "grew by 2" in shot.why


@pytest.mark.parametrize("details", [False, True], ids=["metrics-only", "usage-details"])
def test_a_prefix_cache_hit_is_discarded_and_the_warm_probe_shows_it(standin, details):
    """vLLM puts cached_tokens in usage only with --enable-prompt-tokens-details (and only for a hit): without
    it the hit is seen in vllm:prefix_cache_hits_total, and a fresh shot (usage says nothing) is still kept."""
    srv = standin(env={"SIM_DECODE_TPS": "500"}, extra=("--enable-prompt-tokens-details",) if details else ())
    opts = ShotOptions(api=Api.COMPLETIONS, max_tokens=20)
    prompt = fresh_prompt(LONG)
    with open_client(srv.url) as http:
        first = take(http, "tiny", Shot(0, "prose", 1, 0), [prompt], opts)
        again = take(http, "tiny", Shot(1, "prose", 1, 0), [prompt], opts)  # the same prompt: cached
    assert first.ok, first.why
    assert first.requests[0].cached_tokens is None  # no hit: vLLM reports no details
    assert again.discarded is Discard.CACHED and again.delta.cache_hits > 0
    if details:
        assert again.requests[0].cached_tokens > 0 and f"cached_tokens={again.requests[0].cached_tokens}" in again.why
    else:
        assert again.requests[0].cached_tokens is None
        assert f"prefix_cache_hits_total grew by {again.delta.cache_hits:g}" in again.why
    assert again.ttft_s < first.ttft_s  # the cache shortened the prefill


def test_a_busy_server_is_waited_for_with_a_bound_then_the_shot_discarded(standin):
    srv = standin(env={"SIM_DECODE_TPS": "50"})
    hog = _foreign(srv.url, max_tokens=200)  # 4 s
    assert _wait_running(srv.url, 1)
    shot = Shot(0, "prose", 1, 0)
    with open_client(srv.url) as http:
        take(http, "tiny", shot, [fresh_prompt("hello")], ShotOptions(max_tokens=5, idle_bound_s=0.3))
    assert shot.discarded is Discard.BUSY and "within 0.3 s" in shot.why
    hog.join(30)


def test_bench_reports_a_polluted_shot_and_does_not_average_it(standin):
    """The CLI: someone else's request during the first measured shot; bench re-takes it, lists it with
    its reason, and the median is over the kept shots only."""
    srv = standin(env={"SIM_DECODE_TPS": "300"})
    polluted = threading.Event()

    def intruder() -> None:
        if _wait_running(srv.url, 1, bound_s=60):
            _foreign(srv.url, max_tokens=3).join(30)
            polluted.set()
    threading.Thread(target=intruder, daemon=True).start()
    code, data, text = bench_cli("--url", srv.url, "--profile", "prose", "--shots", "3", "--warmup", "0",
                                 "--max-tokens", "150", "--json")
    assert code == 0, text
    assert polluted.is_set()
    (g,) = data["groups"]
    assert [d["reason"] for d in data["discarded"]] == ["polluted"]
    assert g["kept"] == 3 and g["discarded"] == 1 and g["decode_tps"]["n"] == 3
    kept = sorted(s["decode_tps"] for s in g["shots"] if s["ok"])
    assert g["decode_tps"]["median"] == pytest.approx(kept[1])
