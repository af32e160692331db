"""The figures of a group of shots (one configuration, one profile): pure functions, unit-tested.

Note 16: report median, min, max and spread = (max - min) / median; with speculation the spread is
6-27%, so fewer than 10 shots above 15% spread give a provisional headline. The median's confidence
interval is distribution-free (order statistics of a Binomial(n, 1/2)), so no scipy is needed.
"""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

PROVISIONAL_SPREAD = 0.15
MIN_SHOTS = 10
CONFIDENCE = 0.95
Z95 = 1.959964
ADVICE_WIDTH = 0.10  # the relative CI width the "take N shots" advice aims at (the median within about ±5%)


@dataclass(frozen=True)
class Summary:
    n: int
    median: float
    min: float
    max: float

    @property
    def spread(self) -> float:
        return (self.max - self.min) / self.median if self.median else math.inf

    def as_dict(self) -> dict:
        return {"n": self.n, "median": self.median, "min": self.min, "max": self.max, "spread": self.spread}


def summarize(values: list[float]) -> Summary | None:
    if not values:
        return None
    return Summary(len(values), statistics.median(values), min(values), max(values))


def median_ci(values: list[float], confidence: float = CONFIDENCE) -> tuple[float, float] | None:
    """Distribution-free CI for the median: [x_(j), x_(n-j+1)] with the largest j such that
    P(Binomial(n, 1/2) < j) <= (1 - confidence) / 2. None when n is too small for that confidence
    (n < 6 at 95%: even [min, max] covers less)."""
    n = len(values)
    if n == 0:
        return None
    xs = sorted(values)
    alpha = (1 - confidence) / 2
    cdf, j = 0.0, 0  # cdf = P(B < j+1) as j grows
    while j < n // 2:
        p = math.comb(n, j) / 2 ** n
        if cdf + p > alpha:
            break
        cdf += p
        j += 1
    if j == 0:
        return None
    return xs[j - 1], xs[n - j]


def ci_width(values: list[float], confidence: float = CONFIDENCE) -> float | None:
    """The CI's width relative to the median; None when there is no interval yet."""
    ci = median_ci(values, confidence)
    med = statistics.median(values) if values else 0
    if ci is None or not med:
        return None
    return (ci[1] - ci[0]) / med


def shots_needed(values: list[float], width: float = ADVICE_WIDTH) -> int:
    """Shots for a median 95% CI about `width` wide (relative), from the observed scatter.

    The median's standard error is ~1.2533 s / sqrt(n) (s: the shots' standard deviation), so a 95%
    interval 2 * 1.96 * 1.2533 * s / sqrt(n) wide falls to `width` x median at
    n = (2 * 1.96 * 1.2533 * s / (width x median))^2; never fewer than MIN_SHOTS (note 16)."""
    if len(values) < 2:
        return MIN_SHOTS
    med, s = statistics.median(values), statistics.stdev(values)
    if not med:
        return MIN_SHOTS
    n = math.ceil((2 * Z95 * math.sqrt(math.pi / 2) * s / (width * med)) ** 2)
    return max(MIN_SHOTS, n)


@dataclass(frozen=True)
class Headline:
    summary: Summary
    provisional: bool
    advice: str | None
    ci: tuple[float, float] | None

    def as_dict(self) -> dict:
        return {**self.summary.as_dict(), "provisional": self.provisional, "advice": self.advice,
                "ci95": list(self.ci) if self.ci else None}


def headline(values: list[float]) -> Headline | None:
    """The decode figure with its verdict: provisional when spread > 15% on fewer than 10 shots."""
    s = summarize(values)
    if s is None:
        return None
    provisional = s.spread > PROVISIONAL_SPREAD and s.n < MIN_SHOTS
    advice = None
    if provisional:
        need = shots_needed(values)
        advice = (f"spread {s.spread:.1%} over {s.n} shots: provisional; take {need} shots "
                  f"(--shots {need}, or --until-stable {ADVICE_WIDTH:g})")
    return Headline(s, provisional, advice, median_ci(values))


@dataclass(frozen=True)
class Acceptance:
    """Speculative decoding from the /metrics deltas of the kept shots (note 17)."""

    drafts: float
    draft_tokens: float
    accepted: float
    per_pos: tuple[float, ...]
    budget: int  # k, the draft budget (num_speculative_tokens)
    budget_source: str

    @property
    def tokens_per_step(self) -> float:
        """Output tokens per verification step = 1 + accepted / drafts."""
        return 1 + self.accepted / self.drafts

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.draft_tokens if self.draft_tokens else 0.0

    @property
    def per_pos_rates(self) -> list[float]:
        """Share of drafts whose position i was accepted."""
        return [p / self.drafts for p in self.per_pos]

    @property
    def saturation(self) -> float:
        """tokens per step / draft budget: near 100% the budget limits, low means the drafter guesses badly."""
        return self.tokens_per_step / self.budget if self.budget else 0.0

    def as_dict(self) -> dict:
        return {"drafts": self.drafts, "draft_tokens": self.draft_tokens, "accepted": self.accepted,
                "accepted_per_pos": list(self.per_pos), "tokens_per_step": self.tokens_per_step,
                "acceptance_rate": self.acceptance_rate, "per_pos_rates": self.per_pos_rates,
                "draft_budget": self.budget, "draft_budget_source": self.budget_source,
                "saturation": self.saturation}


def acceptance(deltas: list, budget: int | None = None) -> Acceptance | None:
    """Sum the kept shots' deltas (metrics.Delta); None when the server did no speculation.

    The budget is the recipe's num_speculative_tokens when known, else draft_tokens / drafts, else the
    number of per-position counters."""
    spec = [d for d in deltas if d.drafts]
    if not spec:
        return None
    drafts = sum(d.drafts for d in spec)
    draft_tokens = sum(d.draft_tokens or 0 for d in spec)
    accepted = sum(d.accepted or 0 for d in spec)
    width = max(len(d.per_pos) for d in spec)
    per_pos = tuple(sum(d.per_pos[i] for d in spec if i < len(d.per_pos)) for i in range(width))
    if budget:
        source = "recipe"
    elif draft_tokens:
        budget, source = round(draft_tokens / drafts), "metrics: draft_tokens / drafts"
    else:
        budget, source = width, "metrics: per-position counters"
    return Acceptance(drafts, draft_tokens, accepted, per_pos, budget, source)
