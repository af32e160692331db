"""vLLM's /metrics (Prometheus text, parsed by prometheus_client) and the deltas around one shot.

Counters are summed over their label sets (engine, model_name, finished_reason) except the accepted
tokens per draft position, which stay per position. A counter a server does not export (no
speculation: no spec_decode_* families) reads as absent, not as zero acceptance.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import httpx
from prometheus_client.parser import text_string_to_metric_families

RUNNING = "vllm:num_requests_running"
WAITING = "vllm:num_requests_waiting"
SUCCESS = "vllm:request_success_total"
DRAFTS = "vllm:spec_decode_num_drafts_total"
DRAFT_TOKENS = "vllm:spec_decode_num_draft_tokens_total"
ACCEPTED = "vllm:spec_decode_num_accepted_tokens_total"
PER_POS = "vllm:spec_decode_num_accepted_tokens_per_pos_total"
CACHE_QUERIES = "vllm:prefix_cache_queries_total"
CACHE_HITS = "vllm:prefix_cache_hits_total"


class MetricsError(Exception):
    """/metrics could not be read or parsed."""


@dataclass(frozen=True)
class Scrape:
    """sample name -> summed value; per-position accepted tokens by position."""

    values: dict[str, float]
    per_pos: dict[int, float] = field(default_factory=dict)

    def get(self, name: str) -> float | None:
        return self.values.get(name)


def parse(text: str) -> Scrape:
    """Parse Prometheus exposition text; raises MetricsError on text the parser refuses."""
    values: dict[str, float] = {}
    per_pos: dict[int, float] = {}
    try:
        for family in text_string_to_metric_families(text):
            for sample in family.samples:
                if sample.name == PER_POS:
                    pos = int(sample.labels.get("position", "-1"))
                    per_pos[pos] = per_pos.get(pos, 0.0) + sample.value
                values[sample.name] = values.get(sample.name, 0.0) + sample.value
    except (ValueError, TypeError) as exc:
        raise MetricsError(f"/metrics is not Prometheus text: {exc}") from None
    return Scrape(values, per_pos)


def scrape(http: httpx.Client, timeout: float = 10.0) -> Scrape:
    try:
        resp = http.get("/metrics", timeout=timeout)
    except httpx.HTTPError as exc:
        raise MetricsError(f"/metrics: {type(exc).__name__}: {exc}") from None
    if resp.status_code != 200:
        raise MetricsError(f"/metrics answered {resp.status_code}")
    return parse(resp.text)


@dataclass(frozen=True)
class Delta:
    """What the server counted between two scrapes. Spec fields are None without speculation."""

    success: float
    drafts: float | None = None
    draft_tokens: float | None = None
    accepted: float | None = None
    per_pos: tuple[float, ...] = ()
    cache_hits: float | None = None

    @property
    def spec(self) -> bool:
        return bool(self.drafts)

    def as_dict(self) -> dict:
        return {"success": self.success, "drafts": self.drafts, "draft_tokens": self.draft_tokens,
                "accepted": self.accepted, "accepted_per_pos": list(self.per_pos), "cache_hits": self.cache_hits}


def _d(after: Scrape, before: Scrape, name: str) -> float | None:
    a, b = after.get(name), before.get(name)
    return None if a is None or b is None else a - b


def delta(before: Scrape, after: Scrape) -> Delta:
    positions = sorted(set(after.per_pos) & set(before.per_pos))
    return Delta(success=_d(after, before, SUCCESS) or 0.0, drafts=_d(after, before, DRAFTS),
                 draft_tokens=_d(after, before, DRAFT_TOKENS), accepted=_d(after, before, ACCEPTED),
                 per_pos=tuple(after.per_pos[p] - before.per_pos[p] for p in positions),
                 cache_hits=_d(after, before, CACHE_HITS))


def wait_idle(http: httpx.Client, bound_s: float, poll_s: float = 0.02) -> Scrape | None:
    """Scrape until num_requests_running (and waiting) is 0; the idle scrape, or None past the bound."""
    deadline = time.monotonic() + bound_s
    while True:
        snap = scrape(http)
        if not snap.get(RUNNING) and not snap.get(WAITING):
            return snap
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)
