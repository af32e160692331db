"""The head's OpenAI-compatible API, as the readiness check and `status` see it (plain HTTP)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from dataclasses import dataclass


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
            raise RuntimeError(f"/v1/models answered {status}")
        return [m["id"] for m in json.loads(body).get("data", [])]

    def complete(self, model: str, prompt: str, max_tokens: int = 8, timeout: float = 30.0) -> dict:
        """One real, short, greedy completion: proof that the engine serves, which /health is not."""
        status, body = self.request("POST", "/v1/completions", {
            "model": model, "prompt": prompt, "max_tokens": max_tokens, "temperature": 0}, timeout=timeout)
        if status != 200:
            raise RuntimeError(f"/v1/completions answered {status}: {body[:200].decode(errors='replace')}")
        return json.loads(body)
