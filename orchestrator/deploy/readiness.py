"""Ready means /health, then the model in /v1/models, then one real completion; each probe keeps its reason."""

from __future__ import annotations

import re
import socket
import urllib.error

from ..http_api.endpoint import ApiError, Endpoint, completion_answer, model_ids
from .waits import Rejected, Seen, Tick, wait_until
from .watch import Monitor

PROMPT = "The DGX Spark cluster is"


_CONTROL = re.compile(r"[\x00-\x1f\x7f-\x9f]")


def _excerpt(body: bytes, limit: int = 160) -> str:
    """The server's text on one line, its control characters escaped (none reaches a terminal)."""
    text = body.decode(errors="replace").strip().replace("\n", " ")
    text = _CONTROL.sub(lambda m: f"\\x{ord(m.group()):02x}", text)
    return text[:limit] + ("…" if len(text) > limit else "")


def _call(endpoint: Endpoint, method: str, path: str, body: dict | None = None, timeout: float = 5.0):
    """(status, body) or (None, why the request did not get an answer)."""
    try:
        return endpoint.request(method, path, body, timeout=timeout)
    except urllib.error.URLError as exc:
        reason = exc.reason
        return None, str(getattr(reason, "strerror", None) or reason)
    except (socket.timeout, TimeoutError):
        return None, f"no answer within {timeout:.0f} s"
    except OSError as exc:
        return None, exc.strerror or str(exc)


def health(endpoint: Endpoint) -> Seen:
    status, body = _call(endpoint, "GET", "/health", timeout=2.0)
    if status is None:
        return Seen(False, f"GET /health: {body}")
    return Seen(status == 200, f"GET /health: {status} {_excerpt(body)}".rstrip())


def model_listed(endpoint: Endpoint, model: str) -> Seen:
    status, body = _call(endpoint, "GET", "/v1/models")
    if status != 200:
        return Seen(False, f"GET /v1/models: {status or body}")
    try:
        names = model_ids(body)
    except ApiError:
        return Seen(False, f"GET /v1/models: unreadable answer {_excerpt(body)}")
    return Seen(model in names, f"GET /v1/models lists {', '.join(names) or 'nothing'}")


def completes(endpoint: Endpoint, model: str, node: str, answer: dict, timeout: float = 30.0) -> Seen:
    """One greedy token. A 4xx is final (wrong model name, bad request): waiting cannot change it."""
    status, body = _call(endpoint, "POST", "/v1/completions",
                         {"model": model, "prompt": PROMPT, "max_tokens": 1, "temperature": 0}, timeout=timeout)
    seen = f"POST /v1/completions: {status or ''} {_excerpt(body) if status else body}".replace("  ", " ")
    if status is not None and 400 <= status < 500 and status not in (408, 429):
        raise Rejected(node, "the server refused the readiness completion", seen)
    if status != 200:
        return Seen(False, seen)
    try:
        answer.update(completion_answer(body))
    except ApiError as exc:
        return Seen(False, f"POST /v1/completions: unreadable answer ({exc})")
    return Seen(True, seen)


def wait_ready(endpoint: Endpoint, model: str, monitor: Monitor, head: str, timeout: float,
               tick: Tick | None = None) -> str:
    """Polled every 0.5 s and re-checked on every new log line; returns the completion's text."""
    wait_until(lambda: health(endpoint), monitor, timeout=timeout, interval=0.5, what=f"{endpoint.url}/health",
               node=head, tick=tick)
    wait_until(lambda: model_listed(endpoint, model), monitor, timeout=60, interval=0.2,
               what=f"model {model} in /v1/models", node=head, tick=tick)
    answer: dict = {}
    wait_until(lambda: completes(endpoint, model, head, answer), monitor, timeout=120, interval=1.0,
               what="one real completion", node=head, tick=tick)
    return answer["choices"][0].get("text", "")
