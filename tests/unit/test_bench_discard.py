"""The discard rules of a shot (notes 15, 17): judged on constructed results, no server."""

from __future__ import annotations

from pathlib import Path

import pytest

from orchestrator.bench import metrics as m
from orchestrator.bench import prompts
from orchestrator.bench.shot import Discard, RequestResult, Shot, judge


def _req(cached: int | None = 0, completion: int | None = 800, first: int | None = 1, decode_s=2.0) -> RequestResult:
    return RequestResult(ttft_s=0.1, completion_tokens=completion, first_chunk_tokens=first, decode_s=decode_s,
                         content_chunks=200, cached_tokens=cached, prompt_tokens=40, t_first_ns=1, t_last_ns=2)


def _shot(c: int = 1, success: float = 1, reqs=None) -> Shot:
    s = Shot(index=0, profile="code", concurrency=c, prompt_id=0, requests=reqs or [_req() for _ in range(c)])
    s.delta = m.Delta(success=success)
    return s


def _scrape(running: float = 0) -> m.Scrape:
    return m.Scrape({m.RUNNING: running})


def test_clean_shot_is_kept_and_its_decode_rate_is_from_usage():
    s = _shot()
    judge(s, _scrape())
    assert s.ok
    assert s.decode_tps == pytest.approx(799 / 2.0)
    assert s.requests[0].event_rate == pytest.approx(199 / 2.0)  # counting events: off by tokens/event


@pytest.mark.parametrize("success", [0, 2, 3])
def test_success_delta_not_exactly_c_is_polluted(success):
    s = _shot(success=success)
    judge(s, _scrape())
    assert s.discarded is Discard.POLLUTED and f"grew by {success}" in s.why


def test_concurrency_expects_c_successes():
    s = _shot(c=4, success=4)
    judge(s, _scrape())
    assert s.ok
    s = _shot(c=4, success=5)
    judge(s, _scrape())
    assert s.discarded is Discard.POLLUTED


def test_a_request_still_running_after_the_shot_is_polluted():
    s = _shot()
    judge(s, _scrape(running=1))
    assert s.discarded is Discard.POLLUTED and "still running" in s.why


def test_prefix_cache_hit_is_discarded():
    s = _shot(reqs=[_req(cached=32)])
    judge(s, _scrape())
    assert s.discarded is Discard.CACHED and "cached_tokens=32" in s.why


def test_freshness_from_the_hits_counter_when_usage_has_no_details():
    """vLLM's usage carries prompt_tokens_details only with --enable-prompt-tokens-details and a hit."""
    s = _shot(reqs=[_req(cached=None)])
    s.delta = m.Delta(success=1, cache_hits=0)
    judge(s, _scrape())
    assert s.ok, s.why
    s = _shot(reqs=[_req(cached=None)])
    s.delta = m.Delta(success=1, cache_hits=48)
    judge(s, _scrape())
    assert s.discarded is Discard.CACHED and "prefix_cache_hits_total grew by 48" in s.why


def test_unreported_cache_and_usage_are_discarded_not_assumed():
    s = _shot(reqs=[_req(cached=None)])  # no details and no hits counter: freshness unproven
    judge(s, _scrape())
    assert s.discarded is Discard.NO_CACHE_REPORT
    s = _shot(reqs=[_req(completion=None)])
    judge(s, _scrape())
    assert s.discarded is Discard.NO_USAGE


def test_no_decode_interval_is_too_short():
    s = _shot(reqs=[_req(decode_s=None)])
    judge(s, _scrape())
    assert s.discarded is Discard.TOO_SHORT


def test_prompt_file_errors_name_file_and_line(tmp_path: Path):
    f = tmp_path / "mine.txt"
    f.write_text("# comment\nfirst prompt\n---\n\n---\nthird\n")
    with pytest.raises(prompts.PromptError, match=r"mine.txt:5: empty prompt"):
        prompts.load_file(f)
    f.write_text("# comment\nfirst prompt\n---\nsecond\n")
    assert prompts.load_file(f) == {"mine": ["first prompt", "second"]}
    j = tmp_path / "sets.json"
    j.write_text('{"code": ["a", ""]}')
    with pytest.raises(prompts.PromptError, match="profile 'code' must be a non-empty list"):
        prompts.load_file(j)
    j.write_text('{"code": [\n"a",,]}')
    with pytest.raises(prompts.PromptError, match=r"sets.json:2: not JSON"):
        prompts.load_file(j)
    with pytest.raises(prompts.PromptError, match="unknown profile 'poetry'"):
        prompts.select(["poetry"], None)


def test_bundled_profiles_ship_as_package_data():
    for p in prompts.PROFILES:
        assert len(prompts.bundled(p)) >= 5
