"""The fabric's judgment (pure): which method a cluster can run, and a run against its baseline."""

from __future__ import annotations

import pytest

from orchestrator.fabric.baseline import Direction, Figures, Link, newest, parse_copy
from orchestrator.fabric.judge import judge
from orchestrator.fabric.measure import MeasureError, choose
from orchestrator.facts.fabric_perf import Method
from orchestrator.preflight.checks_fabric_speed import judged
from orchestrator.checks.verdict import Status


def figures(forward: float, backward: float, method: Method = Method.IPERF3, at: float = 1.0) -> Figures:
    return Figures(cluster="lab", method=method, seconds=3, measured_at=at, links=[Link(
        a="spark-1", b="spark-2", latency_us=40.0,
        directions=(Direction(src="spark-1", dst="spark-2", gbit_s=forward),
                    Direction(src="spark-2", dst="spark-1", gbit_s=backward)))])


def test_rdma_only_with_perftest_everywhere_and_profile_roce():
    both = {"spark-1": frozenset({"ib_write_bw", "ib_write_lat", "iperf3", "python3"}),
            "spark-2": frozenset({"ib_write_bw", "ib_write_lat", "iperf3", "python3"})}
    assert choose(both, "roce") is Method.RDMA
    assert choose(both, "tcp") is Method.IPERF3
    one = {**both, "spark-2": frozenset({"python3"})}
    assert choose(one, "roce") is Method.STREAM
    with pytest.raises(MeasureError, match="spark-2 has neither iperf3 nor python3"):
        choose({**both, "spark-2": frozenset()}, "roce")


def test_a_direction_below_the_fraction_is_a_drop_naming_link_direction_and_both_figures():
    j = judge(figures(0.40, 0.40), figures(0.39, 0.19), 0.8)
    assert [c.direction for c in j.drops] == ["spark-2→spark-1"]
    said = j.drops[0].said()
    assert said.startswith("spark-1↔spark-2 (spark-2→spark-1): 0.19 Gbit/s now, baseline 0.4 Gbit/s (48%")
    assert judge(figures(99.0, 99.0), figures(80.0, 99.5), 0.8).drops == []  # 80.8%: not below


def test_another_method_is_not_compared_and_a_missing_link_is_said():
    assert "measured with rdma" in judge(figures(100, 100, Method.RDMA), figures(50, 50)).method_changed
    empty = Figures(cluster="lab", method=Method.IPERF3, seconds=3, measured_at=2, links=[])
    assert judge(figures(1, 1), empty).unmatched == ["spark-1↔spark-2: in the baseline, not measured now"]


def test_the_verdict_fails_both_ends_of_a_slow_link():
    v = judged(judge(figures(0.4, 0.4), figures(0.4, 0.1)), ["spark-1", "spark-2"])
    assert {n: c.status for n, c in v.cells.items()} == {"spark-1": Status.FAIL, "spark-2": Status.FAIL}
    assert "spark-1↔spark-2 (spark-2→spark-1)" in v.fix and "baseline 0.4 Gbit/s" in v.fix
    ok = judged(judge(figures(0.4, 0.4), figures(0.41, 0.39)), ["spark-1", "spark-2"])
    assert {c.status for c in ok.cells.values()} == {Status.OK} and ok.fix == ""


def test_the_newest_copy_of_the_baseline_wins_and_a_bad_copy_is_named():
    old, new = figures(1, 1, at=1.0), figures(2, 2, at=5.0)
    assert parse_copy("MISSING\n") is None
    assert parse_copy(new.to_json()) == new
    with pytest.raises(ValueError, match="unreadable fabric baseline"):
        parse_copy("{")
    found = newest({"spark-1": old, "spark-2": new, "spark-3": ValueError("unreadable")})
    assert found.baseline == new and found.problems == {"spark-3": "unreadable"}
