"""bench statistics: median/spread, the order-statistics CI, the provisional rule and its advice, acceptance."""

from __future__ import annotations

import math
import statistics

import pytest

from orchestrator.bench import stats
from orchestrator.bench.metrics import Delta


def test_summary_spread_is_range_over_median():
    s = stats.summarize([40.0, 38.0, 42.0, 41.0, 39.0])
    assert (s.n, s.median, s.min, s.max) == (5, 40.0, 38.0, 42.0)
    assert s.spread == pytest.approx(0.10)


def test_median_ci_order_statistics():
    xs = [float(v) for v in range(1, 11)]  # n=10: P(B<=1)=0.0107 <= 0.025 < P(B<=2)=0.0547 -> [x2, x9]
    assert stats.median_ci(xs) == (2.0, 9.0)
    assert stats.median_ci([float(v) for v in range(1, 7)]) == (1.0, 6.0)  # n=6: 1/64 <= 0.025
    assert stats.median_ci([1.0, 2.0, 3.0, 4.0, 5.0]) is None  # n=5: even [min, max] covers < 95%
    assert stats.median_ci([]) is None


def test_median_ci_coverage_is_at_least_the_confidence():
    """The interval [x_j, x_(n-j+1)] covers the median with probability 1 - 2 P(B < j) >= 0.95."""
    for n in range(6, 60):
        xs = list(range(n))
        lo, hi = stats.median_ci([float(x) for x in xs])
        j = int(lo) + 1
        miss = 2 * sum(math.comb(n, i) for i in range(j)) / 2 ** n
        assert miss <= 0.05
        wider_miss = 2 * sum(math.comb(n, i) for i in range(j + 1)) / 2 ** n
        assert wider_miss > 0.05 or j == n // 2  # and j is the largest such
        assert hi == float(n - j)


def test_five_shots_with_big_spread_are_provisional_with_advice():
    values = [38.0, 40.5, 42.0, 45.5, 47.0]  # spread 22.5%
    h = stats.headline(values)
    assert h.provisional
    need = stats.shots_needed(values)
    s = statistics.stdev(values)
    assert need == max(10, math.ceil((2 * 1.959964 * math.sqrt(math.pi / 2) * s / (0.10 * 42.0)) ** 2))
    assert f"take {need} shots" in h.advice and "provisional" in h.advice


def test_small_spread_or_ten_shots_are_not_provisional():
    assert not stats.headline([40.0, 40.2, 39.9, 40.1, 40.0]).provisional
    wide_ten = [38.0, 47.0, 40.0, 41.0, 42.0, 43.0, 44.0, 39.0, 45.0, 46.0]
    h = stats.headline(wide_ten)
    assert h.summary.spread > 0.15 and not h.provisional and h.advice is None


def test_shots_needed_never_below_ten():
    assert stats.shots_needed([40.0, 40.1, 40.0]) == 10
    assert stats.shots_needed([40.0]) == 10


def test_ci_width_relative():
    xs = [float(v) for v in range(95, 106)]  # median 100, n=11: [x2, x10] = [96, 104]
    assert stats.ci_width(xs) == pytest.approx(0.08)


def test_acceptance_tokens_per_step_rates_and_saturation():
    deltas = [Delta(success=1, drafts=100, draft_tokens=500, accepted=280, per_pos=(95, 80, 60, 30, 15)),
              Delta(success=1, drafts=100, draft_tokens=500, accepted=300, per_pos=(97, 85, 65, 35, 18))]
    acc = stats.acceptance(deltas, budget=5)
    assert acc.tokens_per_step == pytest.approx(1 + 580 / 200)
    assert acc.acceptance_rate == pytest.approx(580 / 1000)
    assert acc.per_pos_rates == pytest.approx([192 / 200, 165 / 200, 125 / 200, 65 / 200, 33 / 200])
    assert acc.saturation == pytest.approx((1 + 580 / 200) / 5)
    assert acc.budget_source == "recipe"


def test_acceptance_budget_from_metrics_and_none_without_speculation():
    d = Delta(success=1, drafts=10, draft_tokens=40, accepted=20, per_pos=(9, 6, 4, 1))
    assert stats.acceptance([d]).budget == 4
    assert stats.acceptance([d]).budget_source.startswith("metrics")
    no_tokens = Delta(success=1, drafts=10, draft_tokens=None, accepted=20, per_pos=(9, 6, 4))
    assert stats.acceptance([no_tokens]).budget == 3
    assert stats.acceptance([Delta(success=1)]) is None
