"""The Prometheus counters and gauges the bench reads (vLLM's names, docs/vllm-reference.md), updated per step."""
from __future__ import annotations

import threading

from .base import FINISH_REASONS


class Metrics:
    """Counters and gauges, all under one lock so a scrape sees whole steps."""

    def __init__(self, model: str, spec_k: int):
        self.model, self.spec_k = model, spec_k
        self.lock = threading.Lock()
        self.c = {"prompt_tokens": 0, "generation_tokens": 0, "prefix_cache_queries": 0,
                  "prefix_cache_hits": 0, "spec_decode_num_drafts": 0,
                  "spec_decode_num_draft_tokens": 0, "spec_decode_num_accepted_tokens": 0}
        self.success = dict.fromkeys(FINISH_REASONS, 0)
        self.per_pos = [0] * spec_k
        self.running = self.waiting = 0

    def add(self, **kw) -> None:
        with self.lock:
            for k, v in kw.items():
                self.c[k] += v

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

    def render(self) -> str:
        lab = f'model_name="{self.model}",engine="0"'
        out = []

        def metric(name, kind, help_, samples):
            full = name + ("_total" if kind == "counter" else "")
            out.extend([f"# HELP {full} {help_}", f"# TYPE {full} {kind}"])
            out.extend(f"{full}{{{lab}{extra}}} {float(v)!r}" for extra, v in samples)

        with self.lock:
            metric("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.",
                   [("", self.running)])
            metric("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.",
                   [("", self.waiting)])
            metric("vllm:request_success", "counter", "Count of successfully processed requests.",
                   [(f',finished_reason="{r}"', n) for r, n in self.success.items()])
            metric("vllm:prefix_cache_queries", "counter",
                   "Prefix cache queries, in terms of number of queried tokens.",
                   [("", self.c["prefix_cache_queries"])])
            metric("vllm:prefix_cache_hits", "counter",
                   "Prefix cache hits, in terms of number of cached tokens.", [("", self.c["prefix_cache_hits"])])
            if self.spec_k:
                for key, help_ in (("spec_decode_num_drafts", "Number of spec decoding drafts."),
                                   ("spec_decode_num_draft_tokens", "Number of draft tokens."),
                                   ("spec_decode_num_accepted_tokens", "Number of accepted tokens.")):
                    metric("vllm:" + key, "counter", help_, [("", self.c[key])])
                metric("vllm:spec_decode_num_accepted_tokens_per_pos", "counter",
                       "Accepted tokens per draft position.",
                       [(f',position="{i}"', n) for i, n in enumerate(self.per_pos)])
            metric("vllm:prompt_tokens", "counter", "Number of prefill tokens processed.",
                   [("", self.c["prompt_tokens"])])
            metric("vllm:generation_tokens", "counter", "Number of generation tokens processed.",
                   [("", self.c["generation_tokens"])])
        return "\n".join(out) + "\n"
