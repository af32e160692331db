"""`spark-deploy preflight` on the simulated cluster (issue 10): healthy -> every check on every node, exit
0; a driver, a locked SM clock or a shared JIT directory on ONE node -> that node, the check and both values
named, and `up` refuses the same way before any container starts. (Model, memory, fabric, kernel and vLLM
flag faults: test_preflight_model.py, test_preflight_host.py, test_preflight_vllm.py.)"""

from __future__ import annotations

import json

import pytest

from deploy_helpers import assert_up_refuses, our_containers, spark_deploy

from orchestrator import preflight as registry

pytestmark = pytest.mark.integration


def run(cluster, *extra: str):
    result = spark_deploy("preflight", cluster.recipe_path, "-i", cluster.inventory_path, "--json", *extra)
    assert result.returncode in (0, 1), result.stderr + result.stdout
    report = json.loads(result.stdout)
    return result.returncode, {c["name"]: c for c in report["checks"]}


def test_healthy_cluster_shows_every_check_for_every_node(pair):
    code, checks = run(pair)
    assert code == 0, json.dumps({n: c for n, c in checks.items() if c["status"] == "fail"}, indent=1)
    assert set(registry.select()) and {s.name for s in registry.select()} | {"reachable"} == set(checks)
    for name, c in checks.items():
        if c["scope"] == "head only":
            assert "spark-1" in c["per_node"], name
        else:
            assert set(c["per_node"]) == {"spark-1", "spark-2"}, (name, c)
    table = spark_deploy("preflight", pair.recipe_path, "-i", pair.inventory_path)
    assert table.returncode == 0 and "gpu-parity" in table.stdout and "spark-2" in table.stdout


@pytest.mark.parametrize("fault, check, both, strict_only", [
    (["driver=575.51.03"], "gpu-parity", ("580.", "575.51.03"), False),
    (["clock=2200", "max_clock=3003"], "sm-clock", ("2200 of 3003 MHz",), True),
    (["clock=2200", "max_clock=2200", "locked=true"], "sm-clock", ("2200 of 2200 MHz, locked",), True),
])
def test_one_node_differs_preflight_and_up_name_it(clean, fault, check, both, strict_only):
    cluster = clean
    cluster.fault(2, "gpu", **dict(f.split("=", 1) for f in fault))
    try:
        code, checks = run(cluster)
        cell = checks[check]["per_node"]["spark-2"]
        assert all(any(text in c["value"] for c in checks[check]["per_node"].values()) for text in both), checks[check]
        if strict_only:
            assert code == 0 and cell["status"] == "warn"
            code, checks = run(cluster, "--strict")
        assert code == 1 and checks[check]["per_node"]["spark-2"]["status"] in ("fail", "warn")
        if not strict_only:
            up = spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path)
            assert up.returncode == 1 and "during preflight" in up.stderr and check in up.stderr and "spark-2" in up.stderr
            assert not any(our_containers(cluster).values()), "nothing may start"
    finally:
        cluster.fault(2, "gpu", reset="true")


def test_a_jit_directory_shared_by_the_nodes_is_named(clean):
    cluster = clean
    cluster.fault("all", "shared-jit")
    try:
        code, checks = run(cluster)
        assert code == 1 and checks["jit-cache"]["status"] == "fail"
        assert any("shared with" in c["value"] for c in checks["jit-cache"]["per_node"].values())
        assert_up_refuses(cluster, cluster.recipe_path, "jit-cache", "spark-2", "shared with")
    finally:
        cluster.fault("all", "local-jit")
