"""`spark-deploy preflight` on the simulated cluster (issue 10): healthy -> every check on every node, exit
0; a driver, a locked SM clock or a shared JIT directory on ONE node -> that node, the check and both values
named, and `up` refuses the same way before any container starts. (Model, memory, fabric, kernel and vLLM
flag faults: test_preflight_model.py, test_preflight_host.py, test_preflight_vllm.py.)"""

from __future__ import annotations

import json

import pytest

from deploy_helpers import assert_up_refuses, our_containers, spark_deploy

from orchestrator import preflight as registry
import cli_json

pytestmark = pytest.mark.integration


def run(cluster, *extra: str):
    result = spark_deploy("preflight", cluster.recipe_path, "-i", cluster.inventory_path, "--json", *extra)
    assert result.returncode in (0, 1), result.stderr + result.stdout
    report = cli_json.result(result.stdout)
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


def test_the_docker_facts_over_the_engine_api_are_what_the_cli_prints(pair, conns):
    """issue 19 acceptance 5: the gathering's docker facts come from ONE python3 process on the Engine API
    socket (facts/engine_probe.py) instead of nine `docker` CLI starts. Against a real dockerd, with a
    running and a stopped container of the recipe, every one parses to what its CLI script gives."""
    from orchestrator.config.load import load_deployment
    from orchestrator.facts.core import FACTS, FactInput, Source, gather_node
    from orchestrator.facts.replaced import Replaced
    from orchestrator.render.labels import Label
    from orchestrator.render.plan import build_plan

    dep = load_deployment(pair.recipe_path, pair.inventory_path)
    plan = build_plan(dep)
    head = plan.ranks[0]
    ours = ["--label", f"{Label.MANAGED}=true", "--label", f"{Label.CLUSTER}={dep.inventory.cluster}",
            "--label", f"{Label.RECIPE}={dep.recipe.name}", "--label", f"{Label.SERVE_PORT}=8000"]
    pair.exec(1, ["docker", "run", "-d", "--name", head.container, *ours, "--entrypoint", "sh", plan.image_id,
                  "-c", "sleep 300", "sh", "--gpu-memory-utilization", "0.6"])
    pair.exec(1, ["docker", "create", "--name", "sd-stopped-one", *ours, "--entrypoint", "true", plan.image_id])
    try:
        names = sorted(n for n, f in FACTS.items() if f.api)
        assert {"docker_info", "docker_version", "image_disk", "image_refs", "recipe_or_named", "replaced"} <= set(names)
        conn = conns.nodes[0]
        given = FactInput(dep.inventory.node(conn.name), dep, plan)
        api = gather_node(conn, names, given)
        cli = gather_node(conn, names, given, engine_api=False)
        assert {n: (o.source, o.error) for n, o in api.items()} == dict.fromkeys(names, (Source.ENGINE_API, None))
        assert {n: (o.source, o.error) for n, o in cli.items()} == dict.fromkeys(names, (Source.SCRIPT, None))
        for name in names:
            if name != "image_disk":
                assert api[name].value == cli[name].value, name
        assert api["image_disk"].value["size"] == cli["image_disk"].value["size"] > 0
        assert abs(api["image_disk"].value["free"] - cli["image_disk"].value["free"]) < 1 << 30  # others write
        assert api["replaced"].value == [Replaced(head.container, 8000, None, 0.6)]
        assert sorted(c.name for c in api["recipe_or_named"].value) == sorted([head.container, head.container,
                                                                               "sd-stopped-one"])
        assert api["image_refs"].value[0].id == plan.image_id
        assert api["docker_version"].value.code == 0 and api["docker_version"].value.output
    finally:
        pair.exec(1, ["docker", "rm", "-f", head.container, "sd-stopped-one"], check=False)
