"""The head's OpenAI-compatible API, as the readiness check and `status` see it (plain HTTP)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass


class ApiError(RuntimeError):
    """The API answered, but not what was asked: an error status, or a body of the wrong shape (named)."""


def _json(body: bytes, what: str):
    try:
        return json.loads(body)
    except (ValueError, RecursionError):
        raise ApiError(f"{what} answered something that is not JSON: {body[:120]!r}") from None


def model_ids(body: bytes) -> list[str]:
    """The served model names in a /v1/models answer: `data[].id`, each a string."""
    data = _json(body, "/v1/models")
    listed = data.get("data", []) if isinstance(data, dict) else None
    if not isinstance(listed, list):
        raise ApiError(f"/v1/models: `data` is not a list in {str(data)[:120]!r}")
    ids = [m.get("id") if isinstance(m, dict) else None for m in listed]
    if not all(isinstance(i, str) for i in ids):
        raise ApiError(f"/v1/models: an entry of `data` has no string `id`: {str(listed)[:120]!r}")
    return ids


def completion_answer(body: bytes) -> dict:
    """A /v1/completions answer whose `choices[0].text` is a string (what every reader of it takes)."""
    answer = _json(body, "/v1/completions")
    choices = answer.get("choices") if isinstance(answer, dict) else None
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise ApiError(f"/v1/completions: no list of choices in {str(answer)[:120]!r}")
    if not isinstance(choices[0].get("text"), str):
        raise ApiError(f"/v1/completions: choices[0].text is {str(choices[0].get('text'))[:60]!r}, not a string")
    return answer


@dataclass(frozen=True)
class Endpoint:
    host: str
    port: int

    @property
    def url(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return f"http://{host}:{self.port}"

    def request(self, method: str, path: str, body: dict | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
        data = json.dumps(body).encode() if body is not None else None
        req = urllib.request.Request(self.url + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"} if data else {})
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                return resp.status, resp.read()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read()

    def healthy(self, timeout: float = 2.0) -> bool:
        try:
            return self.request("GET", "/health", timeout=timeout)[0] == 200
        except (OSError, urllib.error.URLError):
            return False

    def models(self, timeout: float = 5.0) -> list[str]:
        status, body = self.request("GET", "/v1/models", timeout=timeout)
        if status != 200:
            raise ApiError(f"/v1/models answered {status}")
        return model_ids(body)

    def complete(self, model: str, prompt: str, max_tokens: int = 8, timeout: float = 30.0) -> dict:
        """One real, short, greedy completion: proof that the engine serves, which /health is not."""
        status, body = self.request("POST", "/v1/completions", {
            "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}, timeout=timeout)
        if status != 200:
            raise ApiError(f"/v1/completions answered {status}: {body[:200]!r}")
        return completion_answer(body)
