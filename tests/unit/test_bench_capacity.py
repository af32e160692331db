"""bench --replicates' statistics (bench/capacity.py), against numbers worked by hand."""

import math

import pytest

from orchestrator.bench.capacity import capacity, mean_interval, outliers, prediction_interval, t975
from orchestrator.bench.record import headline_text


def test_t_quantiles_from_the_table():
    assert t975(2) == 4.303 and t975(3) == 3.182 and t975(30) == 2.042 and t975(31) == 1.960
    with pytest.raises(ValueError):
        t975(0)


def test_mean_interval_by_hand():
    # 40, 38, 42: mean 40, s = sqrt((0 + 4 + 4) / 2) = 2, half = 4.303 * 2 / sqrt(3) = 4.9687
    lo, hi = mean_interval([40.0, 38.0, 42.0])
    assert lo == pytest.approx(35.0313, abs=1e-4) and hi == pytest.approx(44.9687, abs=1e-4)
    assert mean_interval([40.0]) is None


def test_prediction_interval_is_wider_by_sqrt_1_plus_1_over_n():
    # the same three: half = 4.303 * 2 * sqrt(4/3) = 9.9374
    lo, hi = prediction_interval([40.0, 38.0, 42.0])
    assert lo == pytest.approx(30.0626, abs=1e-4) and hi == pytest.approx(49.9374, abs=1e-4)


def test_the_field_report_first_run_is_named_and_left_out():
    # note 16: a first run said 69.3, re-runs 38-42
    cap = capacity([69.3, 40.0, 38.0, 42.0], [1, 2, 3, 4], [0.02, 0.01, 0.01, 0.01])
    assert [o.replicate for o in cap.outliers] == [1]
    assert cap.used == [40.0, 38.0, 42.0]
    assert cap.capacity == pytest.approx(35.0313, abs=1e-4)
    words = cap.outliers[0].words()
    assert words.startswith("replicate 1 (first run after start): 69.3 vs 38.0-42.0 tok/s")
    assert words.endswith("not used for capacity")
    # between the replicates: (69.3 - 38) / mean(69.3, 40, 38, 42) = 31.3 / 47.325
    assert cap.between == pytest.approx(31.3 / 47.325)


def test_an_honest_replicate_is_not_named_when_an_outlier_widens_the_others():
    # held against 69.3, 38, 42 (s = 17.2), 40 lies well inside; only replicate 1 is out
    assert [o.replicate for o in outliers([69.3, 40.0, 38.0, 42.0], [1, 2, 3, 4])] == [1]


def test_agreeing_replicates_all_count():
    # 40, 41, 39, 40: for 41 the others are 40, 39, 40 (mean 39.667, s 0.5774, PI half 4.303*0.5774*1.1547
    # = 2.869): 41 is inside; the capacity is mean 40 - 3.182 * s / 2 with s = sqrt(2/3) = 0.8165 -> 38.701
    cap = capacity([40.0, 41.0, 39.0, 40.0], [1, 2, 3, 4], [0.0] * 4)
    assert cap.outliers == []
    assert cap.capacity == pytest.approx(40 - 3.182 * math.sqrt(2 / 3) / 2, abs=1e-9)


def test_two_replicates_give_an_interval_but_name_no_outlier():
    # one other value has no interval: nothing can be named; capacity 40 - 12.706 * 1.4142 / 1.4142 = 27.294
    cap = capacity([39.0, 41.0], [1, 2], [0.0, 0.0])
    assert cap.outliers == [] and cap.capacity == pytest.approx(27.294)


def test_no_capacity_from_one_replicate_and_it_says_why():
    cap = capacity([40.0], [2], [0.0])
    assert cap.capacity is None and "needs 2" in cap.why_none


def test_history_shows_the_capacity_with_the_headline():
    bench = {"headline": {"code": {"decode_tps": 40.04, "tokens_per_step": None}},
             "replicates": {"n": 4, "profiles": {"code": {"capacity": 35.03, "left_out": ["replicate 1 ..."]}}}}
    assert headline_text(bench) == "code 40.0 cap 35.0 (3 of 4 runs)"
    assert headline_text({"headline": {"code": {"decode_tps": 40.04}}}) == "code 40.0"


def test_the_first_run_fault_counts_fixed_length_requests_across_restarts(tmp_path):
    from orchestrator.sim.standin.speed import FirstRunFast

    env = {"SIM_FAULT_FIRST_RUN_FAST": "2", "SIM_FAULT_FIRST_RUN_REQUESTS": "3",
           "SIM_FAULT_FIRST_RUN_STATE": str(tmp_path / "count")}
    first = FirstRunFast.from_env(env)
    assert [first.take(), first.take()] == [True, True]
    again = FirstRunFast.from_env(env)  # the same container started again: it goes on counting
    assert [again.take(), again.take()] == [True, False]
    assert FirstRunFast.from_env({}).take() is False  # no fault: never fast
