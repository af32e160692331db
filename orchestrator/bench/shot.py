"""One shot: c simultaneous requests under the field's protocol (notes 14, 15, 17), and its discard rules.

Before: the server must be idle (num_requests_running == 0 and nothing waiting), waited for with a bound.
Each request carries a unique prefix, so the prefix cache cannot help; the server must confirm it:
vllm:prefix_cache_hits_total must not grow during the shot (vLLM reports usage.prompt_tokens_details only
with --enable-prompt-tokens-details, and only for a hit; a reported hit also discards). After: request_success_total must have grown by exactly
c, and nothing may still run (a request that ran beside ours shared our steps). A shot that breaks a rule
is kept with its reason and never averaged.
"""

from __future__ import annotations

import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from enum import StrEnum

import httpx

from . import metrics as m
from .client import Api, RequestFailed, Streamed, count_tokens, stream


class Discard(StrEnum):
    BUSY = "busy"  # the server did not become idle before the shot
    CACHED = "prefix-cache-hit"  # cached_tokens > 0: the prompt was not fresh
    POLLUTED = "polluted"  # request_success_total grew by other than c, or a request still ran after
    FAILED = "failed"  # a request failed
    NO_USAGE = "no-usage"  # the server sent no usage (include_usage ignored): nothing to count from
    NO_CACHE_REPORT = "no-cached-tokens"  # neither cached_tokens nor the hits counter: freshness unproven
    TOO_SHORT = "too-short"  # all tokens arrived in the first chunk: no decode interval


@dataclass(frozen=True)
class ShotOptions:
    api: Api = Api.CHAT
    max_tokens: int = 800
    idle_bound_s: float = 30.0  # how long to wait for num_requests_running == 0 before a shot
    settle_bound_s: float = 5.0  # how long the server may take to count a finished request
    timeout_s: float = 600.0


@dataclass
class RequestResult:
    """One request of a shot, with the figures of note 14."""

    ttft_s: float | None
    completion_tokens: int | None
    first_chunk_tokens: int | None
    decode_s: float | None
    content_chunks: int
    cached_tokens: int | None
    prompt_tokens: int | None
    t_first_ns: int | None = None
    t_last_ns: int | None = None

    @property
    def decode_tokens(self) -> int | None:
        if self.completion_tokens is None or self.first_chunk_tokens is None:
            return None
        return self.completion_tokens - self.first_chunk_tokens

    @property
    def decode_tps(self) -> float | None:
        """(completion_tokens - first_chunk_tokens) / (t_last_content - t_first_content)."""
        n = self.decode_tokens
        return n / self.decode_s if n is not None and self.decode_s else None

    @property
    def event_rate(self) -> float | None:
        """What counting SSE events would call tokens/s (note 14's mistake), kept to show the error."""
        return (self.content_chunks - 1) / self.decode_s if self.decode_s else None

    def as_dict(self) -> dict:
        return {"ttft_s": self.ttft_s, "completion_tokens": self.completion_tokens,
                "first_chunk_tokens": self.first_chunk_tokens, "decode_s": self.decode_s,
                "decode_tps": self.decode_tps, "content_chunks": self.content_chunks,
                "event_rate": self.event_rate, "cached_tokens": self.cached_tokens,
                "prompt_tokens": self.prompt_tokens}


@dataclass
class Shot:
    index: int
    profile: str
    concurrency: int
    prompt_id: int
    requests: list[RequestResult] = field(default_factory=list)
    delta: m.Delta | None = None
    discarded: Discard | None = None
    why: str = ""
    warmup: bool = False

    @property
    def ok(self) -> bool:
        return self.discarded is None

    @property
    def decode_tps(self) -> float | None:
        """Per-request decode tok/s (the mean over the shot's requests; at c=1 the request's own)."""
        rates = [r.decode_tps for r in self.requests if r.decode_tps is not None]
        return sum(rates) / len(rates) if rates else None

    @property
    def aggregate_tps(self) -> float | None:
        """All requests' decode tokens over the wall time from the first first-content to the last chunk."""
        reqs = [r for r in self.requests if r.decode_tokens is not None and r.t_first_ns and r.t_last_ns]
        if not reqs:
            return None
        span = (max(r.t_last_ns for r in reqs) - min(r.t_first_ns for r in reqs)) / 1e9
        return sum(r.decode_tokens for r in reqs) / span if span > 0 else None

    @property
    def ttft_s(self) -> float | None:
        values = [r.ttft_s for r in self.requests if r.ttft_s is not None]
        return sum(values) / len(values) if values else None

    @property
    def tokens_per_event(self) -> float | None:
        n = sum(r.decode_tokens or 0 for r in self.requests)
        events = sum(max(0, r.content_chunks - 1) for r in self.requests)
        return n / events if events else None

    def as_dict(self) -> dict:
        return {"index": self.index, "profile": self.profile, "concurrency": self.concurrency,
                "prompt_id": self.prompt_id, "warmup": self.warmup, "ok": self.ok,
                "discarded": None if self.discarded is None else str(self.discarded), "why": self.why,
                "decode_tps": self.decode_tps, "aggregate_tps": self.aggregate_tps, "ttft_s": self.ttft_s,
                "tokens_per_event": self.tokens_per_event,
                "delta": None if self.delta is None else self.delta.as_dict(),
                "requests": [r.as_dict() for r in self.requests]}


def fresh_prompt(prompt: str) -> str:
    """A unique prefix in the first prompt block, so no cached block can match (note 15)."""
    return f"Request {uuid.uuid4().hex[:16]}.\n{prompt}"


def _measure(http: httpx.Client, model: str, got: Streamed) -> RequestResult:
    first = count_tokens(http, model, got.first_text) if got.first_text else None
    span = None
    if got.t_first_content is not None and got.t_last_content is not None:
        span = (got.t_last_content - got.t_first_content) / 1e9
    return RequestResult(ttft_s=got.ttft_s, completion_tokens=got.completion_tokens, first_chunk_tokens=first,
                         decode_s=span or None, content_chunks=got.content_chunks, cached_tokens=got.cached_tokens,
                         prompt_tokens=got.prompt_tokens, t_first_ns=got.t_first_content,
                         t_last_ns=got.t_last_content)


def _settled(http: httpx.Client, before: m.Scrape, want: int, bound_s: float) -> m.Scrape:
    """The after-scrape: once the server has counted our requests and runs nothing, or at the bound."""
    import time

    deadline = time.monotonic() + bound_s
    while True:
        after = m.scrape(http)
        counted = (after.get(m.SUCCESS) or 0) - (before.get(m.SUCCESS) or 0)
        if (counted >= want and not after.get(m.RUNNING)) or time.monotonic() >= deadline:
            return after
        time.sleep(0.01)


def judge(shot: Shot, after: m.Scrape | None) -> None:
    """Apply the discard rules to a shot whose requests are done (pure, unit-tested)."""
    c = shot.concurrency
    if shot.delta is not None and shot.delta.success != c:
        shot.discarded, shot.why = Discard.POLLUTED, (
            f"request_success_total grew by {shot.delta.success:g}, not {c}: another request was counted")
    elif after is not None and after.get(m.RUNNING):
        shot.discarded, shot.why = Discard.POLLUTED, (
            f"{after.get(m.RUNNING):g} request(s) still running after the shot: they shared its steps")
    elif any(r.completion_tokens is None for r in shot.requests):
        shot.discarded, shot.why = Discard.NO_USAGE, "no usage in the stream (stream_options.include_usage ignored)"
    elif any(r.cached_tokens for r in shot.requests):
        hit = max(r.cached_tokens or 0 for r in shot.requests)
        shot.discarded, shot.why = Discard.CACHED, f"prefix cache hit: cached_tokens={hit} (must be 0)"
    elif shot.delta is not None and shot.delta.cache_hits:
        shot.discarded, shot.why = Discard.CACHED, (
            f"prefix cache hit: vllm:prefix_cache_hits_total grew by {shot.delta.cache_hits:g} tokens (must be 0)")
    elif (shot.delta is None or shot.delta.cache_hits is None) and any(r.cached_tokens is None for r in shot.requests):
        shot.discarded, shot.why = Discard.NO_CACHE_REPORT, (
            "neither usage.prompt_tokens_details.cached_tokens nor vllm:prefix_cache_hits_total: cannot prove the "
            "prefix cache did not help")
    elif any(r.decode_tps is None for r in shot.requests):
        shot.discarded, shot.why = Discard.TOO_SHORT, "no decode interval (everything came in the first chunk)"


def fire(http: httpx.Client, model: str, prompts: list[str], opts: ShotOptions,
         pool: ThreadPoolExecutor | None = None) -> list[Streamed]:
    """Send the prompts at once (one thread each beyond the first) and wait for every stream."""
    if len(prompts) == 1:
        return [stream(http, opts.api, model, prompts[0], opts.max_tokens, opts.timeout_s)]
    own = pool is None
    pool = pool or ThreadPoolExecutor(max_workers=len(prompts))
    try:
        futures = [pool.submit(stream, http, opts.api, model, p, opts.max_tokens, opts.timeout_s) for p in prompts]
        return [f.result() for f in futures]
    finally:
        if own:
            pool.shutdown(wait=True)


def take(http: httpx.Client, model: str, shot: Shot, prompts: list[str], opts: ShotOptions) -> Shot:
    """Run one shot of len(prompts) requests (prompts already made fresh) and judge it."""
    before = m.wait_idle(http, opts.idle_bound_s)
    if before is None:
        shot.discarded, shot.why = Discard.BUSY, (
            f"vllm:num_requests_running was not 0 within {opts.idle_bound_s:g} s before the shot")
        return shot
    try:
        streamed = fire(http, model, prompts, opts)
    except RequestFailed as exc:
        shot.discarded, shot.why = Discard.FAILED, str(exc)
        return shot
    after = _settled(http, before, shot.concurrency, opts.settle_bound_s)
    shot.delta = m.delta(before, after)
    try:
        shot.requests = [_measure(http, model, s) for s in streamed]
    except RequestFailed as exc:
        shot.discarded, shot.why = Discard.FAILED, str(exc)
        return shot
    judge(shot, after)
    return shot
