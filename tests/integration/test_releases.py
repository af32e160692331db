"""Releases on the simulated cluster (issue 9): history on the nodes, automatic restore, rollback, the
deploy lock, the audit log. Real sshd, dockerd, stand-in and HTTP; the real CLI in subprocesses."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request

import pytest

from deploy_helpers import CLI, node_docker, recipe_variant, spark_deploy

pytestmark = pytest.mark.integration

SECRET_MARKER = "hf_SECRETMARKER9f3c1d77"


def history(cluster) -> list[dict]:
    result = spark_deploy("history", "-i", cluster.inventory_path, "--json")
    assert result.returncode == 0, result.stderr + result.stdout
    return json.loads(result.stdout)


def running(cluster, node: int) -> dict[str, dict]:
    """name -> inspect data of every running spark-deploy container on the node."""
    ids = node_docker(cluster, node, "ps", "-q", "--no-trunc", "--filter", "label=spark-deploy.managed=true",
                      check=True).stdout.split()
    if not ids:
        return {}
    data = json.loads(node_docker(cluster, node, "inspect", *ids, check=True).stdout)
    return {d["Name"].lstrip("/"): d for d in data}


def plan_hashes(cluster) -> set[str]:
    return {d["Config"]["Labels"]["spark-deploy.plan-hash"] for n in (1, 2) for d in running(cluster, n).values()}


def completion(cluster, port: int = 8000) -> str:
    head = cluster.node(1)
    body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 4}).encode()
    request = urllib.request.Request(f"http://{head.ip}:{port}/v1/completions", body,
                                     {"Content-Type": "application/json"})
    with urllib.request.urlopen(request, timeout=30) as response:
        return json.loads(response.read())["choices"][0]["text"]


def up(cluster, recipe, *extra, env=None):
    return spark_deploy("up", recipe, "-i", cluster.inventory_path, *extra, env=env, timeout=600)


def test_a_failed_up_restores_the_serving_release_and_history_says_so(clean, tmp_path):
    cluster = clean
    a = recipe_variant(cluster, tmp_path / "a.yaml")
    a2 = recipe_variant(cluster, tmp_path / "a2.yaml", vllm={"max_model_len": 2048})
    a3 = recipe_variant(cluster, tmp_path / "a3.yaml", vllm={"max_model_len": 2048}, extra={"no-such-flag": True})

    first = up(cluster, a)
    assert first.returncode == 0, first.stderr + first.stdout
    second = up(cluster, a2)
    assert second.returncode == 0, second.stderr + second.stdout
    assert "replaces release 1" in second.stdout
    release2_hash = plan_hashes(cluster)
    assert len(release2_hash) == 1

    third = up(cluster, a3)
    assert third.returncode == 1, third.stderr + third.stdout
    assert "no-such-flag" in third.stderr, third.stderr
    assert "release 2 serves again" in third.stderr, third.stderr
    assert plan_hashes(cluster) == release2_hash, "release 2's containers must be the ones running"
    assert completion(cluster)

    records = history(cluster)
    assert [r["id"] for r in records] == [3, 2, 1]
    by_id = {r["id"]: r for r in records}
    assert by_id[1]["outcome"] == "superseded"
    assert by_id[2]["outcome"] == "serving" and by_id[2]["serving"] is True
    assert by_id[3]["outcome"] == "failed" and by_id[3]["restored"] == 2 and by_id[3]["failed_phase"]
    assert not by_id[1]["serving"] and not by_id[3]["serving"]
    assert by_id[2]["plan_hash"] in release2_hash
