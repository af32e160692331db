"""Issue 10 acceptance 1-2 for the memory, fabric and kernel checks on a real 2-node simulated cluster:
healthy -> exit 0; one real fault on spark-2 -> exit 1 naming spark-2, the check and both nodes' values,
and `up` refuses the same way in its preflight step, starting nothing.

The sim recipe as `sim up` pins it (gpu_memory_utilization 0.7): the simulated nodes show a DGX Spark's
memory (sim-memory, node_memory.SPARK), not this machine's.
"""

from __future__ import annotations

import json

import pytest
from ruamel.yaml import YAML

from deploy_helpers import assert_up_refuses, our_containers, recipe_variant, spark_deploy
import cli_json

pytestmark = pytest.mark.integration

CHECKS = ["memory-headroom", "fabric-ip", "socket-ifname", "mtu-parity", "fabric-reach", "roce-hca", "roce-gid",
          "kernel"]


def preflight(cluster, recipe) -> tuple[int, dict]:
    args = ["preflight", recipe, "-i", cluster.inventory_path, "--json"]
    for name in CHECKS:
        args += ["--only", name]
    res = spark_deploy(*args, timeout=120)
    assert res.returncode in (0, 1), res.stderr
    report = cli_json.result(res.stdout)
    return res.returncode, {c["name"]: c for c in report["checks"]}


def test_healthy_then_each_fault_on_spark_2(pair, tmp_path):
    cluster = pair
    recipe = recipe_variant(cluster, tmp_path / "recipe.yaml")

    code, checks = preflight(cluster, recipe)
    assert code == 0, json.dumps(checks, indent=1)
    assert set(CHECKS) <= set(checks)
    for name in ("memory-headroom", "fabric-ip", "socket-ifname", "mtu-parity", "fabric-reach", "kernel"):
        assert {n: c["status"] for n, c in checks[name]["per_node"].items()} == {"spark-1": "ok", "spark-2": "ok"}
    for name in ("roce-hca", "roce-gid"):  # the sim inventory is profile tcp: said, not passed silently
        assert all(c["status"] == "skip" and "profile tcp" in c["value"] for c in checks[name]["per_node"].values())
    real_kernel = checks["kernel"]["per_node"]["spark-1"]["value"]

    faults = [
        (("meminfo", "available=2g"), ("meminfo", "reset=true"), "memory-headroom",
         lambda one, two: "MemAvailable 2.0 GiB" in two and "vLLM 0.7 x MemTotal 119.7 GiB = 83.8 GiB" in two
         and "vLLM refuses to start" in two and "MemAvailable 2.0 GiB" not in one),
        (("mtu", "mtu=1400"), ("mtu", "reset=true"), "mtu-parity",
         lambda one, two: one == "mtu 1500" and two == "mtu 1400"),
        (("kernel", "release=6.11.0-1016-nvidia"), ("kernel", "reset=true"), "kernel",
         lambda one, two: two.startswith("6.11.0-1016-nvidia ") and one == real_kernel),
        (("partition",), ("heal",), "fabric-reach",
         lambda one, two: "cannot reach spark-2 (" in one and "cannot reach spark-1 (" in two),
    ]
    for fault, undo, name, both_values in faults:
        cluster.fault("spark-2", fault[0], **dict(a.split("=", 1) for a in fault[1:]))
        try:
            code, checks = preflight(cluster, recipe)
            verdict = checks[name]
            cells = verdict["per_node"]
            assert code == 1, (fault, verdict)
            assert verdict["status"] == "fail" and cells["spark-2"]["status"] == "fail", (fault, verdict)
            assert "spark-2" in verdict["fix"], (fault, verdict)
            assert both_values(cells["spark-1"]["value"], cells["spark-2"]["value"]), (fault, cells)
            others = {n: c["status"] for n, c in checks.items() if n != name and c["status"] == "fail"}
            assert not others, (fault, others)  # the fault trips its own check only
            assert_up_refuses(cluster, recipe, name, "spark-2")
        finally:
            cluster.fault("spark-2", undo[0], **dict(a.split("=", 1) for a in undo[1:]))
        code, checks = preflight(cluster, recipe)
        assert code == 0, (f"after undoing {fault}", json.dumps(checks, indent=1))


def test_earlyoom_that_would_fire_at_the_expected_headroom_warns(pair, tmp_path):
    """Real earlyoom on spark-2 (field note 8). The sim recipe (0.7) leaves ~11.9 GiB once it serves (its
    ~20 GiB runtime beside its share). earlyoom kills only when memory AND swap are low: with the Spark's
    swap free, -m 10 (12.0 GiB) spares it; on a node without swap the same -m 10 kills it (warn); -m 5 not."""
    cluster = pair
    recipe = recipe_variant(cluster, tmp_path / "recipe.yaml")
    cluster.fault("spark-2", "earlyoom", m="10")
    try:
        code, checks = preflight(cluster, recipe)
        cells = checks["memory-headroom"]["per_node"]
        assert code == 0 and cells["spark-2"]["status"] == "ok", cells
        assert "earlyoom kills below 12.0 GiB with swap nearly full" in cells["spark-2"]["value"]
        assert "earlyoom not running" in cells["spark-1"]["value"]
        cluster.fault("spark-2", "meminfo", swap="0")
        code, checks = preflight(cluster, recipe)
        verdict = checks["memory-headroom"]
        assert code == 0 and verdict["per_node"]["spark-2"]["status"] == "warn", verdict
        assert "under earlyoom's 12.0 GiB threshold with swap 0.0 GiB free (" in verdict["per_node"]["spark-2"]["value"]
        assert "earlyoom -m 10 -r 3600" in verdict["per_node"]["spark-2"]["value"]
        assert verdict["fix"].startswith("spark-2: earlyoom would kill the service")
        strict = spark_deploy("preflight", recipe, "-i", cluster.inventory_path, "--only", "memory-headroom",
                              "--strict", timeout=120)
        assert strict.returncode == 1, strict.stdout + strict.stderr
        cluster.fault("spark-2", "earlyoom", m="5")
        code, checks = preflight(cluster, recipe)
        assert checks["memory-headroom"]["per_node"]["spark-2"]["status"] == "ok", checks["memory-headroom"]
    finally:
        cluster.fault("spark-2", "earlyoom", stop="true")
        cluster.fault("spark-2", "meminfo", reset="true")
    code, checks = preflight(cluster, recipe)
    assert "earlyoom not running" in checks["memory-headroom"]["per_node"]["spark-2"]["value"]


def test_a_socket_interface_the_node_does_not_have(pair, tmp_path):
    """The per-node NCCL/Gloo interface in the inventory names a port spark-2 does not have (another
    machine's name for its QSFP port): preflight names spark-2 and what it has, and up refuses the same way."""
    cluster = pair
    yaml = YAML()
    doc = yaml.load(cluster.inventory_path.read_text())
    spark2 = next(n for n in doc["nodes"] if n["name"] == "spark-2")
    spark2["env"] = {"NCCL_SOCKET_IFNAME": "enp2s0f0np0", "GLOO_SOCKET_IFNAME": "enp2s0f0np0"}
    inventory = tmp_path / "inventory.yaml"
    with inventory.open("w") as handle:
        yaml.dump(doc, handle)
    res = spark_deploy("preflight", cluster.recipe_path, "-i", inventory, "--only", "socket-ifname", "--json",
                       timeout=120)
    assert res.returncode == 1, res.stdout + res.stderr
    cells = {c["name"]: c for c in cli_json.result(res.stdout)["checks"]}["socket-ifname"]["per_node"]
    assert cells["spark-1"]["status"] == "ok" and "enp1s0f0np0" in cells["spark-1"]["value"]
    assert cells["spark-2"]["status"] == "fail"
    assert "NCCL_SOCKET_IFNAME=enp2s0f0np0 matches no interface (has " in cells["spark-2"]["value"]
    assert "enp1s0f0np0" in cells["spark-2"]["value"] and "enP7s7" in cells["spark-2"]["value"]
    before = our_containers(cluster)
    up = spark_deploy("up", cluster.recipe_path, "-i", inventory, timeout=180)
    assert up.returncode == 1 and "during preflight" in up.stderr and "socket-ifname" in up.stderr, up.stderr
    assert "spark-2" in up.stderr and our_containers(cluster) == before
