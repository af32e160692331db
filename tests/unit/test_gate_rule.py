"""The upgrade gate's rule (bench/gate_rule.py): B/A against 1 - max(spread, tolerance), per profile."""

from __future__ import annotations

import pytest

from orchestrator.bench.gate import gate_text
from orchestrator.bench.gate_rule import GateVerdict, ProfileVerdict, judge, overall, ratio_interval, spread_of

A_SHOTS = [100.0, 101.0, 99.0, 100.5, 99.5, 100.2]


def test_a_profile_20_percent_slower_is_below_the_tolerance_bound():
    j = judge("zh", [100.0, 100.4], [80.0, 80.2], A_SHOTS, [s * 0.8 for s in A_SHOTS], 0.03)
    assert j.ratio == pytest.approx(80.1 / 100.2)
    assert j.spread == pytest.approx(0.4 / 100.2)  # the drift of A's block medians, the larger side
    assert j.bound == pytest.approx(0.97) and j.verdict is ProfileVerdict.BELOW
    assert j.interval_kind == "95% CI" and j.interval[0] <= 0.8 <= j.interval[1]
    assert "zh B/A 0.799" in j.text() and "below the bound 0.970" in j.text() and "tolerance 3.0%" in j.text()


def test_a_drift_wider_than_the_tolerance_widens_the_bound():
    # A's blocks 100 and 90: 10.5% drift; B/A 0.92 is inside it, though 8% below A
    j = judge("code", [100.0, 90.0], [87.5, 87.3], A_SHOTS, A_SHOTS, 0.03)
    assert j.spread == pytest.approx(10 / 95) and j.bound == pytest.approx(1 - 10 / 95)
    assert j.verdict is ProfileVerdict.WITHIN


def test_one_block_per_side_uses_the_shots_spread_and_the_range_interval():
    assert spread_of([100.0], [98.0, 100.0, 102.0]) == pytest.approx(0.04)
    (low, high), kind = ratio_interval([98.0, 100.0, 102.0], [99.0, 100.0])
    assert kind == "min-max" and low == pytest.approx(99 / 102) and high == pytest.approx(100 / 98)


def test_the_verdict_needs_every_profile_within_and_something_measured():
    ok = judge("code", [100.0, 100.0], [99.0, 99.5], A_SHOTS, A_SHOTS, 0.03)
    slow = judge("zh", [100.0, 100.0], [80.0, 80.0], A_SHOTS, A_SHOTS, 0.03)
    missing = judge("prose", [100.0], [], A_SHOTS, [], 0.03)
    assert overall([ok]) == (GateVerdict.KEPT, [])
    assert overall([ok, slow]) == (GateVerdict.REJECTED, [slow])
    assert missing.verdict is ProfileVerdict.UNMEASURED and overall([ok, missing])[0] is GateVerdict.REJECTED
    assert overall([])[0] is GateVerdict.REJECTED


def test_history_cell_names_the_verdict_and_the_profile_below():
    slow = judge("zh", [100.0, 100.4], [80.0, 80.2], A_SHOTS, [s * 0.8 for s in A_SHOTS], 0.03)
    cell = gate_text({"verdict": "rejected", "against": 1, "profiles": {"zh": slow.as_dict()}})
    assert cell.startswith("rejected vs r1: zh x0.80 [") and cell.endswith("< 0.97")
    assert gate_text(None) == "-"
