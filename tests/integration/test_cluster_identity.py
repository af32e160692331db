"""A cluster's identity is held by its nodes (docs/releases.md), on the simulated cluster through the real
command line: two inventories with different `cluster:` names for the same two nodes share one lock and
one history; an inventory whose nodes hold another cluster's identity is refused before anything changes."""

from __future__ import annotations

import json
import signal
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from background import up_json
from deploy_helpers import node_docker, recipe_variant, spark_deploy

from orchestrator.sim.state import NODE_STATE_DIR
import cli_json

pytestmark = pytest.mark.integration

IDENTITY = f"{NODE_STATE_DIR}/cluster.json"


def inventory_copy(cluster, dest: Path, change) -> Path:
    yaml = YAML()
    doc = yaml.load(cluster.inventory_path.read_text())
    change(doc)
    with dest.open("w") as handle:
        yaml.dump(doc, handle)
    return dest


def held(cluster, node: int) -> dict | None:
    found = cluster.exec(node, ["cat", IDENTITY], check=False)
    return json.loads(found.stdout) if found.code == 0 else None


def our_containers(cluster) -> dict[int, list[str]]:
    return {n: node_docker(cluster, n, "ps", "-aq", "--filter", "label=spark-deploy.managed=true",
                           check=True).stdout.split() for n in (1, 2)}


def test_two_names_share_one_lock_and_one_history_and_another_clusters_node_is_refused(pair, tmp_path):
    name = YAML(typ="safe").load(pair.inventory_path.read_text())["cluster"]

    # a third cluster: spark-2 alone, under its own inventory; its first locking command gives it an identity
    def alone(doc):
        doc["cluster"], doc["head"] = "third", "spark-2"
        doc["nodes"] = [n for n in doc["nodes"] if n["name"] == "spark-2"]
    third = inventory_copy(pair, tmp_path / "third.yaml", alone)
    pruned = spark_deploy("prune", "-i", third)
    assert pruned.returncode == 0, pruned.stderr + pruned.stdout
    assert held(pair, 2)["id"] == "third" and held(pair, 1) is None

    # the pair's inventory now names a node of another cluster: refused, naming both, nothing changed
    for argv in (["status"], ["up", str(pair.recipe_path)]):
        refused = spark_deploy(*argv, "-i", pair.inventory_path)
        assert refused.returncode == 1, refused.stderr + refused.stdout
        assert "spark-2 belongs to cluster 'third'" in refused.stderr and repr(name) in refused.stderr, refused.stderr
        assert "nothing was changed" in refused.stderr
    assert held(pair, 1) is None and our_containers(pair) == {1: [], 2: []}
    # an inventory that points at the third cluster's head but says it is the pair's cluster
    claims = inventory_copy(pair, tmp_path / "claims.yaml", lambda d: (alone(d), d.update(cluster_id=name)))
    refused = spark_deploy("history", "-i", claims)
    assert refused.returncode == 1 and f"cluster_id {name!r}" in refused.stderr, refused.stderr
    assert "spark-2 belongs to cluster 'third'" in refused.stderr, refused.stderr

    pair.exec(2, ["rm", "-f", IDENTITY])  # spark-2 given back to the pair, as a re-provisioned node would be

    # two names for the same two nodes
    renamed = inventory_copy(pair, tmp_path / "renamed.yaml", lambda d: d.update(cluster="renamed"))
    first = spark_deploy("up", pair.recipe_path, "-i", pair.inventory_path, timeout=600)
    assert first.returncode == 0, first.stderr + first.stdout
    assert held(pair, 1)["id"] == name and held(pair, 2) == held(pair, 1)

    slow = recipe_variant(pair, tmp_path / "slow.yaml", env={"SIM_LOAD_SECONDS": "60"})
    holder = up_json(slow, pair.inventory_path)
    try:
        holder.wait_for(lambda e: e["event"] == "phase-start" and e.get("phase") == "ready")
        second = spark_deploy("up", slow, "-i", renamed, timeout=600)
        assert second.returncode == 1, second.stderr + second.stdout
        assert "another spark-deploy command holds the deploy lock" in second.stderr, second.stderr
        assert f"`spark-deploy up {slow} -i {pair.inventory_path} --json`" in second.stderr, second.stderr
        holder.proc.send_signal(signal.SIGINT)  # release 1 serves again (the automatic restore)
        assert holder.finish() == 130, holder.stderr()
    finally:
        holder.kill()

    histories = []
    for inventory in (pair.inventory_path, renamed):
        shown = spark_deploy("history", "-i", inventory, "--json")
        assert shown.returncode == 0, shown.stderr + shown.stdout
        histories.append(cli_json.result(shown.stdout))
    assert histories[0] == histories[1]
    assert [(r["id"], r["outcome"]) for r in histories[0]] == [(2, "failed"), (1, "serving")], histories[0]
    for inventory in (pair.inventory_path, renamed):
        status = spark_deploy("status", "-i", inventory, "--json", "--no-probe")
        assert status.returncode == 0, status.stderr + status.stdout
        report = cli_json.result(status.stdout)
        assert [(d["release"], d["ok"]) for d in report["deployments"]] == [(1, True)], report
