"""Issue 23 on the simulated cluster: `up` runs the acceptance checks and records them with the facts
after ready; `accept` alone; a stand-in fault fails `up` in the acceptance phase and the previous release
serves again; greedy outputs compared across releases; `watch` healthy, under the reserve, and with a rank
killed. Real sshd, dockerd, stand-in and HTTP; the real CLI in subprocesses."""

from __future__ import annotations

import time

import pytest
from ruamel.yaml import YAML
from prometheus_client.parser import text_string_to_metric_families

from deploy_helpers import completion, forget_releases, node_docker, recipe_variant, spark_deploy
import cli_json

pytestmark = pytest.mark.integration

TOOLS = {"enable-auto-tool-choice": True, "tool-call-parser": "hermes"}


def default_checks(path):
    """The variant without the test clusters' one-check `acceptance:` (tests/conftest.py): the default set."""
    yaml = YAML()
    doc = yaml.load(path.read_text())
    doc.pop("acceptance", None)
    with path.open("w") as fh:
        yaml.dump(doc, fh)
    return path


def history(cluster) -> dict[int, dict]:
    result = spark_deploy("history", "-i", cluster.inventory_path, "--json")
    assert result.returncode == 0, result.stderr + result.stdout
    return {r["id"]: r for r in cli_json.result(result.stdout)}


def checks(record: dict) -> dict[str, dict]:
    return {r["name"]: r for r in record["acceptance"]}


def watch(cluster, *args, timeout: float = 60):
    return spark_deploy("watch", "-i", cluster.inventory_path, *args, timeout=timeout)


def test_acceptance_in_up_accept_watch_and_faults(clean, tmp_path):
    cluster = clean
    forget_releases(cluster)
    inv = cluster.inventory_path
    a = default_checks(recipe_variant(cluster, tmp_path / "a.yaml"))
    a2 = default_checks(recipe_variant(cluster, tmp_path / "a2.yaml", extra={"max-num-seqs": 10}))  # same outputs
    nan = default_checks(recipe_variant(cluster, tmp_path / "nan.yaml", env={"SIM_FAULT_LOGPROBS_NAN": "1"}))
    broken = default_checks(recipe_variant(cluster, tmp_path / "broken.yaml", extra=TOOLS,
                                           env={"SIM_FAULT_FORGET_BEYOND": "100", "SIM_FAULT_TOOL_PLAIN": "1",
                                                "SIM_FAULT_PERTURB": "1"}))

    for recipe in (a, a2):
        done = spark_deploy("up", recipe, "-i", inv, timeout=600)
        assert done.returncode == 0, done.stderr + done.stdout
    records = history(cluster)
    first, second = checks(records[1]), checks(records[2])
    assert {n: r["status"] for n, r in first.items()} == {
        "logprobs-finite": "pass", "greedy-digest": "pass", "needle": "pass", "tool-call": "skip", "thinking": "skip"}
    assert "identical to release 1's" in second["greedy-digest"]["seen"]  # only max-num-seqs changed
    nodes = records[1]["after_ready"]["nodes"]
    assert set(nodes) == {"spark-1", "spark-2"}
    assert all(0 < n["mem_available_gib"] < n["mem_total_gib"] for n in nodes.values())
    assert nodes["spark-1"]["kv_cache_tokens"] > 0 and nodes["spark-1"]["max_concurrency"] > 0
    assert all(n["kv_cache_memory_gib"] > 0 for n in nodes.values())

    alone = spark_deploy("accept", "-i", inv, "--json")
    assert alone.returncode == 0, alone.stderr + alone.stdout
    report = cli_json.result(alone.stdout)
    assert report["ok"] and report["release"] == 2
    assert {r["name"]: r["status"] for r in report["results"]}["greedy-digest"] == "pass"

    prom = tmp_path / "spark.prom"
    healthy = watch(cluster, "--once", "--json", "--textfile", str(prom))
    assert healthy.returncode == 0, healthy.stderr + healthy.stdout
    sample = cli_json.result(healthy.stdout)
    assert sample["ok"] and sample["release"] == 2 and [r["state"] for r in sample["ranks"]] == ["running"] * 2
    assert all(n["mem_available_gib"] > 0 and n["sm_clock_mhz"] > 0 for n in sample["nodes"])
    assert sample["engine"]["generating"] and sample["engine"]["kv_usage"] is not None
    assert sample["engine"]["gen_tps"] > 0 and 0 < sample["engine"]["spec_acceptance_total"] <= 1
    families = {f.name: f for f in text_string_to_metric_families(prom.read_text())}
    assert families["spark_deploy_ok"].samples[0].value == 1.0
    assert {s.labels["rank"] for s in families["spark_deploy_rank_up"].samples} == {"0", "1"}

    failed = spark_deploy("up", nan, "-i", inv, timeout=600)
    assert failed.returncode == 1, failed.stderr + failed.stdout
    assert "acceptance" in failed.stderr and "logprobs-finite" in failed.stderr and "not finite" in failed.stderr
    assert "release 2 serves again" in failed.stderr, failed.stderr
    failed = spark_deploy("up", broken, "-i", inv, timeout=600)
    assert failed.returncode == 1, failed.stderr + failed.stdout
    assert "needle failed" in failed.stderr and "tool-call failed" in failed.stderr and "plain text" in failed.stderr
    assert "release 2 serves again" in failed.stderr, failed.stderr
    completion(cluster)
    records = history(cluster)
    assert records[2]["serving"] and records[4]["failed_phase"] == "acceptance"
    assert "differs from release 2's" in checks(records[4])["greedy-digest"]["seen"]  # the perturbation, shown
    assert checks(records[4])["greedy-digest"]["status"] == "changed"

    try:
        cluster.fault("spark-2", "meminfo", available="30g")  # what the serving rank claims leaves ~0.5 GiB
        low = watch(cluster, "--once", "--json")
        assert low.returncode == 1, low.stderr + low.stdout
        warned = cli_json.result(low.stdout)["warnings"]
        assert any(w.startswith("spark-2: MemAvailable") and "under the reserve" in w for w in warned), warned
    finally:
        cluster.fault("spark-2", "meminfo", reset="true")

    peer = next(r["container"] for r in sample["ranks"] if r["rank"] == 1)
    node_docker(cluster, 2, "kill", peer, check=True)
    started = time.monotonic()
    gone = watch(cluster, "--interval", "2", "--json")
    assert gone.returncode == 1, gone.stderr + gone.stdout
    assert time.monotonic() - started < 2 * 2 + 6  # two intervals, plus the command's start and its SSH reads
    assert "rank 1 (spark-2) is gone" in gone.stderr, gone.stderr
