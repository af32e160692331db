"""Issue 8 items 8 and 9 on the simulated cluster: waits that notice a partition or a lost node within a bound.

- nodes partitioned from each other (the controller reaches both): the peer never joins the rendezvous;
  `up` fails within the join bound naming the peer and the address it cannot reach (not after 600 s);
- the controller's connection to a node drops mid-load: `up` fails within seconds naming that node.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest

from deploy_helpers import CLI, recipe_variant, spark_deploy
import cli_json

pytestmark = pytest.mark.integration

JOIN_S = 3.0  # up's --join-timeout here: the peer cannot reach the head, so only the bound matters


def test_a_peer_that_cannot_reach_the_rendezvous_fails_naming_it_and_the_address(pair):
    peer_argv = cli_json.result(spark_deploy("render", pair.recipe_path, "-i", pair.inventory_path, "--json").stdout)[1]["argv"]
    master = f"{peer_argv[peer_argv.index('--master-addr') + 1]}:{peer_argv[peer_argv.index('--master-port') + 1]}"
    pair.fault(2, "partition")
    try:
        refused = spark_deploy("up", pair.recipe_path, "-i", pair.inventory_path, timeout=240)
        started = time.monotonic()  # past preflight's fabric-reach check: the rendezvous wait must catch it too
        result = spark_deploy("up", pair.recipe_path, "-i", pair.inventory_path, "--join-timeout", str(JOIN_S),
                              "--skip-check", "fabric-reach", timeout=240)
        elapsed = time.monotonic() - started
    finally:
        pair.fault(2, "heal")
    assert refused.returncode == 1 and "during preflight" in refused.stderr and "fabric-reach" in refused.stderr
    assert "spark-2" in refused.stderr and "nothing was stopped" in refused.stderr, refused.stderr
    assert result.returncode == 1, result.stdout + result.stderr
    assert "spark-2 has not joined the rendezvous" in result.stderr
    assert master in result.stderr and "cannot reach" in result.stderr
    assert f"within {JOIN_S:.0f} s" in result.stderr, result.stderr  # the bound given, not the 120 s default
    assert elapsed < JOIN_S + 60, f"took {elapsed:.0f} s: the peer's own 600 s timeout must not end the wait"
    assert spark_deploy("down", "-i", pair.inventory_path).returncode == 0


def test_losing_the_connection_to_a_node_mid_load_fails_within_seconds_naming_it(pair, tmp_path):
    recipe = recipe_variant(pair, tmp_path / "slow.yaml", env={"SIM_LOAD_SECONDS": "120"})
    proc = subprocess.Popen([*CLI, "up", str(recipe), "-i", str(pair.inventory_path), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    gateway = pair.info()["gateway"]
    try:
        for line in proc.stdout:
            event = json.loads(line)
            if event.get("event") == "phase-start" and event.get("phase") == "ready":
                break
        pair.exec(2, ["ip", "route", "replace", "blackhole", f"{gateway}/32"])  # node 2 can no longer answer us
        cut = time.monotonic()
        _, stderr = proc.communicate(timeout=120)
        elapsed = time.monotonic() - cut
    finally:
        if proc.poll() is None:
            proc.kill()
        pair.fault(2, "heal")
    assert proc.returncode == 1, stderr
    assert "spark-2" in stderr and "lost the connection" in stderr
    assert elapsed < 45, f"noticed after {elapsed:.0f} s"
    assert spark_deploy("down", "-i", pair.inventory_path).returncode == 0
