"""Issue 41 acceptance 1: the fabric measured, a baseline kept, a slow link caught by `preflight --fabric`.

A simulated node's fabric is a veth whose speed is whatever the host's CPUs give it, so the test first gives
both nodes' fabric a rated speed with the real traffic shaping `fabric-slow` uses (tbf on the fabric veth),
as a Spark's DAC has one: `fabric test --save` measures it with iperf3 (in the node image) and keeps the
baseline. Then spark-2's link is slowed to half of what was measured: `preflight --fabric` exits 1 naming
spark-1↔spark-2 and both figures, and so does `maintenance verify --fabric` in an open window. Healed
(spark-2's shaping removed), both pass again.
"""

from __future__ import annotations

import time

import pytest

from deploy_helpers import spark_deploy
from test_interrupt_exit_codes import Lines
import cli_json

pytestmark = pytest.mark.integration

RATED = "400mbit"


def fabric_test(pair, *extra: str):
    res = spark_deploy("fabric", "test", "-i", str(pair.inventory_path), "--seconds", "3", "--json", *extra,
                       timeout=180)
    return res, (cli_json.result(res.stdout) if res.stdout.strip() else None)


def preflight_fabric(pair):
    res = spark_deploy("preflight", str(pair.recipe_path), "-i", str(pair.inventory_path), "--fabric",
                       "--only", "fabric-speed", "--json", timeout=180)
    assert res.returncode in (0, 1), res.stderr
    return res.returncode, {c["name"]: c for c in cli_json.result(res.stdout)["checks"]}["fabric-speed"]


def test_a_baseline_is_kept_and_a_link_at_half_its_speed_fails_preflight(pair):
    try:
        pair.fault("all", "fabric-slow", rate=RATED)
        res, run = fabric_test(pair, "--save")
        assert res.returncode == 0, res.stderr + res.stdout
        assert run["method"] == "iperf3" and run["saved"], run
        (link,) = run["links"]
        assert {(d["src"], d["dst"]) for d in link["directions"]} == {("spark-1", "spark-2"), ("spark-2", "spark-1")}
        speeds = {f"{d['src']}>{d['dst']}": d["gbit_s"] for d in link["directions"]}
        assert all(0.1 < s <= 0.41 for s in speeds.values()), speeds  # what the shaping allows, and real traffic
        assert link["latency_us"] and link["latency_us"] > 0
        for node in (1, 2):  # its servers are gone with it
            assert pair.exec(node, ["pgrep", "-x", "iperf3"], check=False).code == 1, node
        # one audit line for the saved baseline, on the head
        entries = cli_json.result(spark_deploy("audit", "-i", str(pair.inventory_path), "--json").stdout)
        assert [e for e in entries if e.get("action") == "fabric-baseline" and e.get("outcome") == "ok"], entries

        code, check = preflight_fabric(pair)
        assert (code, check["status"]) == (0, "ok"), check

        half_kbit = int(speeds["spark-2>spark-1"] * 1e6 / 2)
        pair.fault(2, "fabric-slow", rate=f"{half_kbit}kbit")
        code, check = preflight_fabric(pair)
        assert (code, check["status"]) == (1, "fail"), check
        assert "spark-1↔spark-2" in check["fix"] and "spark-2→spark-1" in check["fix"], check
        base = f"baseline {speeds['spark-2>spark-1']:.3g} Gbit/s"
        assert base in check["fix"] and " now, " in check["fix"], check

        # maintenance verify --fabric judges the same way, inside an open window
        begun = spark_deploy("maintenance", "begin", str(pair.recipe_path), "-i", str(pair.inventory_path),
                             timeout=180)
        assert begun.returncode == 0, begun.stderr + begun.stdout
        verify = spark_deploy("maintenance", "verify", "-i", str(pair.inventory_path), "--fabric", "--json",
                              timeout=180)
        assert verify.returncode == 1, verify.stderr + verify.stdout
        (drop,) = cli_json.result(verify.stdout)["fabric"]["drops"]
        assert drop.startswith("spark-1↔spark-2 (spark-2→spark-1): ") and base in drop, drop

        pair.fault(2, "heal")
        code, check = preflight_fabric(pair)
        assert (code, check["status"]) == (0, "ok"), check
        verify = spark_deploy("maintenance", "verify", "-i", str(pair.inventory_path), "--fabric", "--json",
                              timeout=180)
        assert verify.returncode == 0 and cli_json.result(verify.stdout)["fabric"]["drops"] == [], verify.stdout
    finally:
        pair.fault("all", "heal")


def test_ctrl_c_during_a_measurement_exits_130_and_leaves_no_server_running(pair):
    run = Lines("fabric", "test", "-i", str(pair.inventory_path), "--seconds", "30")
    try:
        run.wait_line(r"spark-1↔spark-2: iperf3")
        _until(lambda: pair.exec(2, ["pgrep", "-x", "iperf3"], check=False).code == 0, "iperf3 serving on spark-2")
        code, stderr = run.interrupt()
        assert code == 130, stderr
    finally:
        run.kill()
    for node in (1, 2):
        _until(lambda: pair.exec(node, ["pgrep", "-x", "iperf3"], check=False).code == 1,
               f"no iperf3 left on spark-{node}", bound=10)


def _until(condition, what: str, bound: float = 60) -> None:
    """Wait for a condition on a node (a process that appears or goes), bounded."""
    deadline = time.monotonic() + bound
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {bound:g} s: {what}")
        time.sleep(0.2)


def test_the_built_in_stream_measures_both_ways_where_iperf3_is_not_wanted(pair):
    res, run = fabric_test(pair, "--method", "stream")
    assert res.returncode == 0, res.stderr + res.stdout
    assert run["method"] == "stream" and not run["saved"], run
    (link,) = run["links"]
    assert all(d["gbit_s"] > 0 and " B in " in d["detail"] for d in link["directions"]), link
    assert link["latency_us"] > 0
    for node in (1, 2):
        assert pair.exec(node, ["pgrep", "-f", "python3 -u -c"], check=False).code == 1, node
