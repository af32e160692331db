"""The stand-in's per-profile acceptance curves (SIM_ACCEPT_CURVE) and the step cost growing with the draft
budget: the truth `spark-deploy tune` has to find. The draws are checked against the formula's rates
(speed.expected), and the best budget per profile is the formula's, for the curves tests/bench/test_tune.py
seeds."""
from __future__ import annotations

import math
import random

import pytest

from orchestrator.sim.standin.base import SimError
from orchestrator.sim.standin.speed import Truth, expected, parse_curves

CURVES = "code=0.98:0.96:0.94:0.92:0.9:0.88:0.3:0.2,prose=0.8:0.5:0.2:0.1:0.05:0.02"
ENV = {"SIM_DRAFT_COST": "0.2", "SIM_ACCEPT_CURVE": CURVES}


def test_curves_parse_and_refuse_bad_entries():
    assert parse_curves("code=0.9:0.5, zh=0.1") == {"code": (0.9, 0.5), "zh": (0.1,)}
    for bad in ("code=0.5:0.9", "code=1.2", "code", "=0.5", "code=a:b"):
        with pytest.raises(SimError, match="bad SIM_ACCEPT_CURVE entry"):
            parse_curves(bad)


def test_draws_accept_each_position_at_its_curve_rate():
    truth = Truth.from_env(ENV, spec_k=8)
    rng = random.Random(11)
    n = 20_000
    for profile, curve in truth.curves.items():
        counts = [0] * 8
        for _ in range(n):
            for i in range(truth.draw(profile, 0.0, rng, 8)):
                counts[i] += 1
        want = expected(truth, profile, 8).per_position
        assert want == tuple(curve[i] if i < len(curve) else 0.0 for i in range(8))
        for i, (got, rate) in enumerate(zip(counts, want)):
            sd = math.sqrt(rate * (1 - rate) / n)
            assert abs(got / n - rate) <= 4 * sd + 1e-9, (profile, i, got / n, rate)


def test_the_budget_caps_the_draw():
    truth = Truth.from_env(ENV, spec_k=2)
    rng = random.Random(3)
    assert max(truth.draw("code", 0.0, rng, 2) for _ in range(500)) == 2
    assert expected(truth, "code", 2).accepted_per_step == pytest.approx(0.98 + 0.96)


def test_step_cost_grows_with_the_budget():
    truth = Truth.from_env(ENV)
    steps = [truth.step_seconds(1, k) for k in (0, 2, 4, 6, 8)]
    assert steps == sorted(steps) and len(set(steps)) == 5
    assert steps[4] / steps[0] == pytest.approx(1 + 0.2 * 8)


def test_each_profile_has_a_best_budget_of_its_own():
    """code gains until 6 and loses after; prose is best at 2: what the tune test's stand-in is seeded with."""
    truth = Truth.from_env(ENV)
    rate = {p: {k: expected(truth, p, k).decode_tps for k in (2, 4, 6, 8)} for p in ("code", "prose")}
    assert max(rate["code"], key=rate["code"].get) == 6
    assert max(rate["prose"], key=rate["prose"].get) == 2
    # the next best is far enough (> 8%) for a few shots to tell apart
    for p in rate:
        best, second = sorted(rate[p].values(), reverse=True)[:2]
        assert best / second > 1.08, (p, rate[p])
    # without a curve a profile keeps SIM_ACCEPT's normal draw
    assert expected(truth, "zh", 4).per_position[0] < 0.5


def test_the_truth_line_carries_the_curves():
    truth = Truth.from_env(ENV, spec_k=6)
    back = Truth.from_line("noise\n" + truth.line() + "\n")
    assert back == truth and back.curves["prose"] == (0.8, 0.5, 0.2, 0.1, 0.05, 0.02)
