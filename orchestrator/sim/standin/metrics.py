"""The Prometheus counters and gauges the bench reads (vLLM's names, docs/vllm-reference.md), updated per step.

A scrape sees them as they were a moment ago, up to SIM_METRICS_LAG engine steps (`lag_s(running)`):
vLLM's API server records an iteration's stats after it has handed out that iteration's outputs, so a
client that scrapes right after its last chunk can miss its own last step. Every change is kept as a
whole snapshot for a short while, and a scrape renders the newest one older than its lag: always a
consistent state.
"""
from __future__ import annotations

import random
import threading
import time
from collections import deque
from collections.abc import Callable

from .base import FINISH_REASONS


class Metrics:
    """Counters and gauges, all under one lock so a scrape sees whole steps."""

    def __init__(self, model: str, spec_k: int, lag_s: Callable[[int], float] = lambda running: 0.0, seed: int = 0):
        self.model, self.spec_k, self.lag_s = model, spec_k, lag_s
        self.lock = threading.Lock()
        self.c = {"prompt_tokens": 0, "generation_tokens": 0, "prefix_cache_queries": 0,
                  "prefix_cache_hits": 0, "spec_decode_num_drafts": 0,
                  "spec_decode_num_draft_tokens": 0, "spec_decode_num_accepted_tokens": 0,
                  "kv_used": 0}  # tokens the running requests hold in the KV cache (prompt + output)
        self.kv_capacity = 0  # the GPU KV cache size in tokens, set once the engine has profiled
        self.success = dict.fromkeys(FINISH_REASONS, 0)
        self.per_pos = [0] * spec_k
        self.running = self.waiting = 0
        self.rng = random.Random(seed * 104729 + 5)
        self.history: deque[tuple[float, tuple]] = deque([(time.monotonic(), self._state())])
        self.shown = 0.0  # the moment the last scrape saw

    def _state(self) -> tuple:
        return dict(self.c), dict(self.success), list(self.per_pos), self.running, self.waiting

    def changed(self) -> None:
        """Keep the state as it is now (call with the lock held, after every change)."""
        now = time.monotonic()
        self.history.append((now, self._state()))
        keep = now - max(2.0, 4 * self.lag_s(self.running))
        while len(self.history) > 1 and self.history[1][0] <= keep:
            self.history.popleft()

    def seen(self) -> tuple:
        """The state a scrape now gets: the newest snapshot older than a lag drawn up to lag_s(), and not
        older than the last scrape's."""
        # never older than what an earlier scrape saw: counters only grow, as Prometheus's do
        target = self.shown = max(self.shown, time.monotonic() - self.lag_s(self.running) * self.rng.random())
        state = self.history[0][1]
        for t, snap in reversed(self.history):
            if t <= target:
                state = snap
                break
        return state

    def add(self, **kw) -> None:
        with self.lock:
            for k, v in kw.items():
                self.c[k] += v
            self.changed()

    def step(self, tokens: int, accepted: int | None) -> None:
        self.batch_step([(tokens, accepted)])

    def batch_step(self, results: list[tuple[int, int | None]]) -> None:
        """One engine step: (tokens emitted, accepted drafts or None without a verification) per request."""
        with self.lock:
            for tokens, accepted in results:
                self.c["generation_tokens"] += tokens
                if accepted is not None:
                    self.c["spec_decode_num_drafts"] += 1
                    self.c["spec_decode_num_draft_tokens"] += self.spec_k
                    self.c["spec_decode_num_accepted_tokens"] += accepted
                    for pos in range(accepted):
                        self.per_pos[pos] += 1
            self.changed()

    def render(self) -> str:
        lab = f'model_name="{self.model}",engine="0"'
        out = []

        def metric(name, kind, help_, samples):
            full = name + ("_total" if kind == "counter" else "")
            out.extend([f"# HELP {full} {help_}", f"# TYPE {full} {kind}"])
            out.extend(f"{full}{{{lab}{extra}}} {float(v)!r}" for extra, v in samples)

        with self.lock:
            c, success, per_pos, running, waiting = self.seen()
        metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
               [("", running)])
        metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
               [("", waiting)])
        usage = min(1.0, c["kv_used"] / self.kv_capacity) if self.kv_capacity else 0.0
        metric("vllm:kv_cache_usage_perc", "gauge", "KV-cache usage. 1 means 100 percent usage.", [("", usage)])
        metric("vllm:request_success", "counter", "Count of successfully processed requests.",
               [(f',finished_reason="{r}"', n) for r, n in success.items()])
        metric("vllm:prefix_cache_queries", "counter",
               "Prefix cache queries, in terms of number of queried tokens.", [("", c["prefix_cache_queries"])])
        metric("vllm:prefix_cache_hits", "counter",
               "Prefix cache hits, in terms of number of cached tokens.", [("", c["prefix_cache_hits"])])
        if self.spec_k:
            for key, help_ in (("spec_decode_num_drafts", "Number of spec decoding drafts."),
                               ("spec_decode_num_draft_tokens", "Number of draft tokens."),
                               ("spec_decode_num_accepted_tokens", "Number of accepted tokens.")):
                metric("vllm:" + key, "counter", help_, [("", c[key])])
            metric("vllm:spec_decode_num_accepted_tokens_per_pos", "counter",
                   "Accepted tokens per draft position.", [(f',position="{i}"', n) for i, n in enumerate(per_pos)])
        metric("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.", [("", c["prompt_tokens"])])
        metric("vllm:generation_tokens", "counter", "Number of generation tokens processed.",
               [("", c["generation_tokens"])])
        return "\n".join(out) + "\n"
