"""Shots per concurrency level and profile, in the order the protocol wants (note 15): warm-up
shots first (kept out of the figures), then N kept shots, or until the median is stable.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field

import httpx

from . import metrics as m
from . import stats
from .client import RequestFailed, stream
from .shot import Discard, Shot, ShotOptions, fresh_prompt, take

WARM_PROBE_TOKENS = 8


@dataclass(frozen=True)
class Plan:
    prompts: dict[str, list[str]]  # profile -> prompts (cycled through shot by shot)
    shots: int = 10
    warmup: int = 1
    concurrency: tuple[int, ...] = (1,)
    until_stable: float | None = None  # relative CI width of the median to reach
    max_shots: int = 40  # bound on kept shots with --until-stable
    shot: ShotOptions = field(default_factory=ShotOptions)
    draft_budget: int | None = None  # k from the recipe, when there is one
    warm_probe: bool = True  # bench's TTFT-when-cached probe after each c = 1 group (tune's table has no use for it)

    def attempts_bound(self) -> int:
        """Discarded shots are re-taken, but never more than this many attempts per group."""
        target = self.max_shots if self.until_stable else self.shots
        return 2 * target + self.warmup + 2


@dataclass
class WarmProbe:
    """The same (already sent) prompt again: the prefix cache should now serve it (cached_tokens > 0)."""

    ttft_s: float | None
    cached_tokens: int | None
    prompt_tokens: int | None
    error: str = ""

    def as_dict(self) -> dict:
        return {"ttft_s": self.ttft_s, "cached_tokens": self.cached_tokens, "prompt_tokens": self.prompt_tokens,
                "error": self.error or None}


@dataclass
class Group:
    concurrency: int
    profile: str
    shots: list[Shot] = field(default_factory=list)
    warm: WarmProbe | None = None
    draft_budget: int | None = None
    stopped: str = ""  # why shooting stopped before the target, if it did

    @property
    def kept(self) -> list[Shot]:
        return [s for s in self.shots if s.ok and not s.warmup]

    @property
    def discarded(self) -> list[Shot]:
        return [s for s in self.shots if not s.ok]

    def decode_values(self) -> list[float]:
        return [s.decode_tps for s in self.kept if s.decode_tps is not None]

    def headline(self) -> stats.Headline | None:
        return stats.headline(self.decode_values())

    def aggregate(self) -> stats.Summary | None:
        return stats.summarize([s.aggregate_tps for s in self.kept if s.aggregate_tps is not None])

    def ttft_cold(self) -> stats.Summary | None:
        return stats.summarize([s.ttft_s for s in self.kept if s.ttft_s is not None])

    def acceptance(self) -> stats.Acceptance | None:
        return stats.acceptance([s.delta for s in self.kept if s.delta is not None], self.draft_budget)

    def steps_per_shot(self) -> list[float]:
        """Tokens per verification step of each kept shot (its own spread shows the drafter's)."""
        return [1 + s.delta.accepted / s.delta.drafts for s in self.kept
                if s.delta is not None and s.delta.drafts and s.delta.accepted is not None]

    def tokens_per_event(self) -> stats.Summary | None:
        return stats.summarize([s.tokens_per_event for s in self.kept if s.tokens_per_event is not None])

    def as_dict(self) -> dict:
        head, agg, ttft, acc = self.headline(), self.aggregate(), self.ttft_cold(), self.acceptance()
        tpe = self.tokens_per_event()
        return {"concurrency": self.concurrency, "profile": self.profile,
                "decode_tps": head.as_dict() if head else None,
                "aggregate_tps": agg.as_dict() if agg else None,
                "ttft_cold_s": ttft.as_dict() if ttft else None,
                "ttft_warm": self.warm.as_dict() if self.warm else None,
                "speculation": acc.as_dict() if acc else None,
                "tokens_per_step_per_shot": stats.summarize(self.steps_per_shot()).as_dict()
                if self.steps_per_shot() else None,
                "tokens_per_event": tpe.as_dict() if tpe else None,
                "kept": len(self.kept), "discarded": len(self.discarded), "stopped": self.stopped or None,
                "shots": [s.as_dict() for s in self.shots]}


def _enough(group: Group, plan: Plan) -> bool:
    kept = len(group.kept)
    if plan.until_stable is None:
        return kept >= plan.shots
    if kept >= plan.max_shots:
        return True
    width = stats.ci_width(group.decode_values())
    return kept >= min(plan.shots, plan.max_shots) and width is not None and width <= plan.until_stable


def warm_probe(http: httpx.Client, model: str, prompt: str, opts: ShotOptions) -> WarmProbe:
    """Send an identical prompt once more (after the server is idle) to see the prefix cache work."""
    try:
        before = m.wait_idle(http, opts.idle_bound_s)
        if before is None:
            return WarmProbe(None, None, None, "server busy")
        got = stream(http, opts.api, model, prompt, WARM_PROBE_TOKENS, opts.timeout_s)
        hits = m.delta(before, m.wait_idle(http, opts.idle_bound_s) or m.scrape(http)).cache_hits
    except (RequestFailed, m.MetricsError) as exc:
        return WarmProbe(None, None, None, str(exc))
    # usage says it only under --enable-prompt-tokens-details; the hits counter says it either way
    cached = got.cached_tokens if got.cached_tokens is not None else (int(hits) if hits is not None else None)
    return WarmProbe(got.ttft_s, cached, got.prompt_tokens)


def run_group(http: httpx.Client, model: str, plan: Plan, profile: str, c: int,
              on_shot: Callable[[Group, Shot], None] = lambda g, s: None, group: Group | None = None) -> Group:
    """Shoot one group; into `group` when given, so a caller holds every shot taken even if this is
    interrupted (a shot lands there once it is whole)."""
    prompts = plan.prompts[profile]
    group = group or Group(c, profile, draft_budget=plan.draft_budget)
    first_sent: str | None = None
    attempt = 0
    while not _enough(group, plan):
        if attempt >= plan.attempts_bound():
            group.stopped = f"stopped after {attempt} attempts ({len(group.discarded)} discarded)"
            break
        base = attempt * c
        ids = [(base + j) % len(prompts) for j in range(c)]
        sent = [fresh_prompt(prompts[i]) for i in ids]
        shot = Shot(index=attempt, profile=profile, concurrency=c, prompt_id=ids[0],
                    warmup=attempt < plan.warmup)
        try:
            take(http, model, shot, sent, plan.shot)
        except m.MetricsError as exc:
            shot.discarded, shot.why = Discard.FAILED, str(exc)
        group.shots.append(shot)
        if shot.ok and not shot.warmup and first_sent is None:
            first_sent = sent[0]
        on_shot(group, shot)
        attempt += 1
    width = stats.ci_width(group.decode_values())
    if plan.until_stable is not None and not group.stopped and (width is None or width > plan.until_stable):
        shown = "none yet" if width is None else f"{width:.1%}"
        group.stopped = (f"--max-shots {plan.max_shots} reached before the median's 95% CI was within "
                         f"{plan.until_stable:.1%} (it is {shown})")
    if c == 1 and first_sent is not None and plan.warm_probe:
        group.warm = warm_probe(http, model, first_sent, plan.shot)
    return group


def run(http: httpx.Client, model: str, plan: Plan,
        on_shot: Callable[[Group, Shot], None] = lambda g, s: None,
        groups: list[Group] | None = None) -> list[Group]:
    """Every concurrency level x profile, one group after the other. Each group joins `groups` before its
    first shot: after an interrupt (Ctrl-C, SIGTERM) the caller still holds the shots already taken."""
    groups = [] if groups is None else groups
    for c in plan.concurrency:
        for profile in plan.prompts:
            group = Group(c, profile, draft_budget=plan.draft_budget)
            groups.append(group)
            run_group(http, model, plan, profile, c, on_shot, group)
    return groups


def interrupted(groups: list[Group], reason: str) -> list[Group]:
    """The groups an interrupt left: the one it cut short says so (`stopped`), the empty ones are dropped."""
    if groups and not groups[-1].stopped:
        groups[-1].stopped = f"{reason} after {len(groups[-1].kept)} kept shot(s)"
    return [g for g in groups if g.shots]
