"""The head's OpenAI-compatible API as the model serves it: the `endpoint_at` seam of `up`."""

from __future__ import annotations

import json
import urllib.error
from dataclasses import dataclass

from orchestrator.http_api.endpoint import Endpoint
from orchestrator.sim.standin import answers

from .model import Fault, World


@dataclass(frozen=True)
class MemoryEndpoint(Endpoint):
    """Endpoint's interface (url, request, healthy, models, complete); `request` asks the model instead of
    opening a socket: refused when no head serves on host:port, 503 until its world is ready."""

    world: World | None = None

    def request(self, method: str, path: str, body: dict | None = None, timeout: float = 5.0) -> tuple[int, bytes]:
        node = self.world.by_address(self.host)
        head = next((c for c in (node.heads() if node else []) if c.ours.serve_port == self.port), None)
        if head is None:
            raise urllib.error.URLError(ConnectionRefusedError(111, "Connection refused"))
        if not self.world.ready(head):
            return 503, b'{"detail":"Service Unavailable"}'
        model = head.ours.served_model
        if (method, path) == ("GET", "/health"):
            return 200, b""
        if (method, path) == ("GET", "/v1/models"):
            return 200, json.dumps({"object": "list", "data": [{"id": model, "object": "model"}]}).encode()
        if (method, path) == ("POST", "/v1/completions"):
            if body.get("model") != model:
                return 404, json.dumps({"error": {"message": f"The model `{body.get('model')}` does not exist."}}).encode()
            return 200, json.dumps(self._completion(head, body)).encode()
        return 404, b'{"detail":"Not Found"}'


    @staticmethod
    def _completion(head, body: dict) -> dict:
        """The stand-in's answers (answers.py): a needle retrieved, finite logprobs unless the head's fault says
        NaN; otherwise the same filler for every prompt, so greedy outputs are identical across releases."""
        faults = answers.Faults(logprobs_nan=head.fault is Fault.NAN_LOGPROBS)
        prompt = body.get("prompt") or ""
        planned = answers.plan(prompt, body, False, answers.Features(), faults, 0)
        tokens = planned.pieces if planned.pieces is not None else [" fast"] * min(int(body.get("max_tokens") or 1), 4)
        logprobs = None if body.get("logprobs") is None else answers.completion_logprobs(tokens, 1, faults)
        return {"id": "cmpl-1", "object": "text_completion", "model": body.get("model"),
                "choices": [{"index": 0, "text": "".join(tokens), "logprobs": logprobs, "finish_reason": "length"}]}


def endpoint_at(world: World):
    """The `endpoint_at` for up(): (host, port) -> the API the model serves there."""
    return lambda host, port: MemoryEndpoint(host, port, world)
