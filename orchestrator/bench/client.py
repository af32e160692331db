"""Streamed OpenAI-compatible requests, timed at each chunk's arrival (time.perf_counter_ns).

Under speculative decoding one SSE event carries every token one verification step accepted (note 14),
so nothing here counts events as tokens: the token count is the server's usage.completion_tokens, and
the tokens of the first content chunk come from the server's own /tokenize.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from enum import StrEnum

import httpx
from httpx_sse import SSEError, connect_sse

from ..http_api.endpoint import ApiError, model_ids


class Api(StrEnum):
    CHAT = "chat"  # /v1/chat/completions: what most clients use
    COMPLETIONS = "completions"  # /v1/completions


PATHS = {Api.CHAT: "/v1/chat/completions", Api.COMPLETIONS: "/v1/completions"}


class RequestFailed(Exception):
    """The server refused or broke a request (status, body or stream)."""


@dataclass
class Streamed:
    """One streamed answer: arrival times (ns, perf_counter) and what the server said it produced."""

    t_sent: int
    t_first_content: int | None = None
    t_last_content: int | None = None
    content_chunks: int = 0  # events that carried text (NOT tokens: a step's tokens share one event)
    first_text: str = ""
    text_parts: list[str] = field(default_factory=list)
    usage: dict | None = None
    finish_reason: str | None = None

    @property
    def text(self) -> str:
        return "".join(self.text_parts)

    @property
    def completion_tokens(self) -> int | None:
        return None if self.usage is None else self.usage.get("completion_tokens")

    @property
    def prompt_tokens(self) -> int | None:
        return None if self.usage is None else self.usage.get("prompt_tokens")

    @property
    def cached_tokens(self) -> int | None:
        """usage.prompt_tokens_details.cached_tokens; None when the server does not report it."""
        details = (self.usage or {}).get("prompt_tokens_details") or {}
        return details.get("cached_tokens")

    @property
    def ttft_s(self) -> float | None:
        return None if self.t_first_content is None else (self.t_first_content - self.t_sent) / 1e9


def _chunk_text(api: Api, choice: dict) -> str:
    if api is Api.CHAT:
        delta = choice.get("delta") or {}
        if not isinstance(delta, dict):
            raise RequestFailed(f"{PATHS[api]} streamed choices[].delta {str(delta)[:60]!r}, not an object")
        text, field_name = delta.get("content") or "", "delta.content"
    else:
        text, field_name = choice.get("text") or "", "text"
    if not isinstance(text, str):
        raise RequestFailed(f"{PATHS[api]} streamed choices[].{field_name} {str(text)[:60]!r}, not a string")
    return text


_USAGE_COUNTS = ("completion_tokens", "prompt_tokens")


def _usage(api: Api, usage) -> dict:
    """The usage object with the counts bench reads checked: each an int when present."""
    details = usage.get("prompt_tokens_details") if isinstance(usage, dict) else None
    counts = [(k, usage.get(k)) for k in _USAGE_COUNTS] if isinstance(usage, dict) else []
    if isinstance(details, dict):
        counts.append(("prompt_tokens_details.cached_tokens", details.get("cached_tokens")))
    bad = [(k, v) for k, v in counts if v is not None and (not isinstance(v, int) or isinstance(v, bool))]
    if not isinstance(usage, dict) or (details is not None and not isinstance(details, dict)) or bad:
        what = f"usage.{bad[0][0]} {bad[0][1]!r}" if bad else f"usage {str(usage)[:80]!r}"
        raise RequestFailed(f"{PATHS[api]} streamed {what}, not a count")
    return usage


def read_event(api: Api, data_text: str, got: Streamed, now: int) -> None:
    """One SSE event's data into `got`; RequestFailed (naming the field) for anything not a chunk."""
    try:
        data = json.loads(data_text)
    except (ValueError, RecursionError):
        raise RequestFailed(f"{PATHS[api]} sent an event that is not JSON: {data_text[:120]!r}") from None
    if not isinstance(data, dict):
        raise RequestFailed(f"{PATHS[api]} sent an event that is not a JSON object: {data_text[:120]!r}")
    if "error" in data:
        raise RequestFailed(f"{PATHS[api]} streamed an error: {json.dumps(data['error'])[:300]}")
    if data.get("usage"):
        got.usage = _usage(api, data["usage"])
    choices = data.get("choices") or []
    if not isinstance(choices, list) or not all(isinstance(c, dict) for c in choices):
        raise RequestFailed(f"{PATHS[api]} streamed choices {str(choices)[:80]!r}, not a list of objects")
    for choice in choices:
        text = _chunk_text(api, choice)
        if text:
            if got.t_first_content is None:
                got.t_first_content, got.first_text = now, text
            got.t_last_content = now
            got.content_chunks += 1
            got.text_parts.append(text)
        if choice.get("finish_reason"):
            got.finish_reason = str(choice["finish_reason"])


def request_body(api: Api, model: str, prompt: str, max_tokens: int) -> dict:
    """Greedy, fixed length (ignore_eos), streamed with usage: the protocol of note 15."""
    body: dict = {"model": model, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                  "stream": True, "stream_options": {"include_usage": True}}
    if api is Api.CHAT:
        body["messages"] = [{"role": "user", "content": prompt}]
    else:
        body["prompt"] = prompt
    return body


def stream(http: httpx.Client, api: Api, model: str, prompt: str, max_tokens: int,
           timeout: float = 600.0) -> Streamed:
    """Send one request and read its SSE stream to [DONE], stamping every content chunk's arrival."""
    body = request_body(api, model, prompt, max_tokens)
    got = Streamed(t_sent=time.perf_counter_ns())
    try:
        with connect_sse(http, "POST", PATHS[api], json=body, timeout=timeout) as source:
            resp = source.response
            if resp.status_code != 200:
                resp.read()
                raise RequestFailed(f"{PATHS[api]} answered {resp.status_code}: {resp.text[:300]}")
            for event in source.iter_sse():
                now = time.perf_counter_ns()
                if event.data.strip() == "[DONE]":
                    break
                read_event(api, event.data, got, now)
    except SSEError as exc:
        raise RequestFailed(f"{PATHS[api]} did not stream server-sent events: {exc}") from None
    except httpx.HTTPError as exc:
        raise RequestFailed(f"{PATHS[api]}: {type(exc).__name__}: {exc}") from None
    return got


def count_tokens(http: httpx.Client, model: str, text: str, timeout: float = 30.0) -> int:
    """How many tokens the server's tokenizer makes of `text` (no special tokens): /tokenize."""
    try:
        resp = http.post("/tokenize", json={"model": model, "prompt": text, "add_special_tokens": False},
                         timeout=timeout)
    except httpx.HTTPError as exc:
        raise RequestFailed(f"/tokenize: {type(exc).__name__}: {exc}") from None
    if resp.status_code != 200:
        raise RequestFailed(f"/tokenize answered {resp.status_code}: {resp.text[:300]}")
    try:
        count = resp.json()["count"]
        if not isinstance(count, int) or isinstance(count, bool):
            raise TypeError(count)
        return count
    except (ValueError, KeyError, TypeError, IndexError, RecursionError):
        raise RequestFailed(f"/tokenize answered without a count: {resp.text[:300]}") from None


def models(http: httpx.Client, timeout: float = 10.0) -> list[str]:
    try:
        resp = http.get("/v1/models", timeout=timeout)
        resp.raise_for_status()
        return model_ids(resp.content)
    except (httpx.HTTPError, ApiError) as exc:
        raise RequestFailed(f"/v1/models: {exc}") from None


def open_client(base_url: str) -> httpx.Client:
    """One keep-alive client per server: every shot reuses the connection, as a benchmark should."""
    return httpx.Client(base_url=base_url.rstrip("/"), timeout=httpx.Timeout(30.0, read=600.0),
                        limits=httpx.Limits(max_connections=256, max_keepalive_connections=256))
