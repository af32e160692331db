"""The simulated Spark's memory model (sim/node_memory.py): pure figures, the rendered file, no daemon."""

from __future__ import annotations

from orchestrator.sim import node_memory
from orchestrator.sim.node_memory import FLOOR_KB, SPARK, figures, render
from orchestrator.sim.standin import memory as standin_memory

GIB = 1 << 20  # kB


def test_idle_is_a_spark_and_a_claim_comes_off_memavailable():
    idle = figures(SPARK, 0)
    assert (idle["MemTotal"], idle["MemAvailable"], idle["SwapFree"], idle["over_kb"]) == \
        (SPARK["MemTotal"], SPARK["MemAvailable"], SPARK["SwapTotal"], 0)
    claim = int(0.7 * SPARK["MemTotal"]) + 20 * GIB
    serving = figures(SPARK, claim)
    assert serving["MemAvailable"] == SPARK["MemAvailable"] - claim
    assert serving["SwapFree"] == SPARK["SwapTotal"] and serving["over_kb"] == 0


def test_past_memory_pages_out_to_swap_then_past_swap_is_over():
    into_swap = figures(SPARK, SPARK["MemAvailable"] + 1 * GIB)  # 1 GiB more than is available
    assert into_swap["MemAvailable"] == FLOOR_KB
    assert into_swap["SwapFree"] == SPARK["SwapTotal"] - (1 * GIB + FLOOR_KB) and into_swap["over_kb"] == 0
    beyond = figures(SPARK, SPARK["MemAvailable"] + SPARK["SwapTotal"])
    assert beyond["SwapFree"] == 0 and beyond["over_kb"] == FLOOR_KB


def test_render_keeps_every_line_and_its_width():
    template = "MemTotal:       24684084 kB\nMemFree:        22614992 kB\nMemAvailable:   23495124 kB\nCached:  1 kB\n"
    one, two = render(template, figures(SPARK, 0)), render(template, figures(SPARK, 90 * GIB))
    assert len(one) == len(two), "rewritten in place: the same length whatever is claimed"
    assert "Cached:  1 kB" in one and f"MemTotal:{SPARK['MemTotal']:16d} kB" in one


def test_outside_a_node_the_standin_claims_nothing(monkeypatch):
    assert standin_memory.SOCKET == node_memory.SOCKET  # the two sides agree on the daemon's address
    monkeypatch.setattr(standin_memory, "SOCKET", "\0spark-sim-memory-test-absent")
    assert standin_memory.claim(0.7, {}, "test") is None
