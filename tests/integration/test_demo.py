"""`spark-deploy demo`: the README's main-job command, end to end on a fresh simulated cluster."""

from __future__ import annotations

import re

import pytest

from orchestrator.sim.cluster import SimCluster

from deploy_helpers import assert_nothing_left, spark_deploy, unique_name

pytestmark = pytest.mark.integration


def test_demo_brings_up_deploys_and_serves(docker_client, sim_images, sim_home):
    name = unique_name()
    try:
        result = spark_deploy("demo", "--name", name, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        out = result.stdout
        for step in ("1. simulated cluster", "2. spark-deploy up", "3. status", "4. one completion", "Tear down"):
            assert step in out
        assert "moe-backend: ok" in out and "cuda-graph-profile: ok" in out
        assert "(24 tokens)" in out
        assert re.search(r"spark-1: sd-sim-tiny-r0-[0-9a-f]{8} running, rank 0", out), out
        assert re.search(r"spark-2: sd-sim-tiny-r1-[0-9a-f]{8} running, rank 1", out), out
        again = spark_deploy("demo", "--name", name, timeout=600)
        assert again.returncode == 0 and "already up, reusing it" in again.stdout and "already serving" in again.stdout
        cluster = SimCluster(name, client=docker_client)
        assert spark_deploy("down", "-i", cluster.inventory_path).returncode == 0
        assert_nothing_left(cluster)
    finally:
        SimCluster(name, client=docker_client).down()
