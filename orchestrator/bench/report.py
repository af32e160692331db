"""A bench run as data: target, plan, groups, ceiling; the JSON `--json` prints and `--report` writes."""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path

from . import ceiling as ce
from ..checks.safetensors_headers import Headers
from .runner import Group, Plan


@dataclass
class CeilingInput:
    headers: Headers
    nodes: int
    bandwidth: float


@dataclass
class BenchResult:
    target: dict
    plan: Plan
    groups: list[Group]
    ceiling_input: CeilingInput | None = None
    ceiling_error: str | None = None
    started_at: float = field(default_factory=time.time)
    finished_at: float | None = None
    interrupted: str | None = None  # "interrupted (Ctrl-C)" / "(SIGTERM)": the groups hold the shots taken

    def single(self) -> list[Group]:
        return [g for g in self.groups if g.concurrency == 1]

    def step_rate(self, g: Group) -> float | None:
        """Verification steps per second at c=1: what the weight-reading ceiling bounds.

        Each step reads the weights once, whatever number of tokens it emits, so a speculative run's
        tok/s is divided by its tokens per step before it is held against the ceiling."""
        head = g.headline()
        if head is None:
            return None
        acc = g.acceptance()
        return head.summary.median / (acc.tokens_per_step if acc else 1.0)

    def ceiling_dict(self) -> dict | None:
        if self.ceiling_input is None:
            return {"error": self.ceiling_error} if self.ceiling_error else None
        ci = self.ceiling_input
        b = ce.breakdown(ci.headers.headers, ci.headers.config)
        top = ce.ceiling(b, ci.nodes, ci.bandwidth)
        rates = {g.profile: self.step_rate(g) for g in self.single()}
        measured = max((r for r in rates.values() if r is not None), default=None)
        return {"node": ci.headers.node, "snapshot": ci.headers.snapshot, "bytes_read": ci.headers.bytes_read,
                "shards": len(ci.headers.headers), "nodes": ci.nodes, "bandwidth": ci.bandwidth,
                **b.as_dict(), "ceiling_tps": top.tokens_per_s,
                "of_ceiling": {p: (r / top.tokens_per_s if r is not None else None) for p, r in rates.items()},
                "steps_per_s": rates,
                "hypotheses": ce.hypotheses(b, ci.nodes, ci.bandwidth, measured)}

    def headline(self) -> dict:
        """Per profile at c=1: median decode tok/s, spread, provisional; what `history` shows."""
        out = {}
        for g in self.single():
            h, acc = g.headline(), g.acceptance()
            if h is None:
                continue
            out[g.profile] = {"decode_tps": h.summary.median, "spread": h.summary.spread, "shots": h.summary.n,
                              "provisional": h.provisional,
                              "tokens_per_step": acc.tokens_per_step if acc else None}
        return out

    def as_dict(self) -> dict:
        p = self.plan
        return {"schema": 1, "started_at": self.started_at, "finished_at": self.finished_at,
                "interrupted": self.interrupted,
                "target": self.target,
                "plan": {"profiles": list(p.prompts), "shots": p.shots, "warmup": p.warmup,
                         "concurrency": list(p.concurrency), "until_stable": p.until_stable,
                         "max_shots": p.max_shots, "max_tokens": p.shot.max_tokens, "api": str(p.shot.api),
                         "draft_budget": p.draft_budget},
                "headline": self.headline(),
                "groups": [g.as_dict() for g in self.groups],
                "discarded": [{"concurrency": g.concurrency, "profile": g.profile, "shot": s.index,
                               "reason": str(s.discarded), "why": s.why}
                              for g in self.groups for s in g.discarded],
                "ceiling": self.ceiling_dict()}


def write(result: BenchResult, directory: Path) -> tuple[Path, Path | None, str | None]:
    """bench.json and bench.png in `directory`; (json, png or None, why there is no png)."""
    from . import chart

    directory.mkdir(parents=True, exist_ok=True)
    data = result.as_dict()
    path = directory / "bench.json"
    path.write_text(json.dumps(data, indent=2, default=str) + "\n")
    png, why = chart.draw(result.groups, directory / "bench.png")
    return path, png, why
