"""`watch --once` when a rank cannot be observed (issue 34, item 5): the peer's management link cut, then the
head's sshd stopped, while the release keeps serving. Exit 1, "cannot observe rank N on NODE (cause)" (never
"is gone"), the generation probe still run and its result reported, the container shown by its real ID or
its name said as a name, each problem said once. Real sshd, dockerd, stand-in and HTTP; the real CLI."""

from __future__ import annotations


import pytest

from deploy_helpers import completion, forget_releases, recipe_variant, spark_deploy
import cli_json

pytestmark = pytest.mark.integration


def watch_once(cluster, *args):
    return spark_deploy("watch", "-i", cluster.inventory_path, "--once", *args, timeout=120)


def assert_unobservable(cluster, rank: int, node: str, names: dict[int, str]) -> None:
    shown = watch_once(cluster, "--json")
    assert shown.returncode == 1, shown.stderr + shown.stdout
    sample = cli_json.result(shown.stdout)
    problem = next(p for p in sample["problems"] if p.startswith(f"cannot observe rank {rank} on {node} ("))
    assert f"the container named {names[rank]} may still run; the endpoint still generates" in problem, problem
    assert not any("is gone" in p for p in sample["problems"]), sample["problems"]
    assert sample["engine"]["probed"] and sample["engine"]["generating"], sample["engine"]
    assert sample["engine"]["probe"] == "a 1-token completion came back"
    unseen = next(r for r in sample["ranks"] if r["rank"] == rank)
    assert unseen["state"] == "unreachable" and unseen["container"] == "" and unseen["name"] == names[rank]
    assert shown.stderr.count("problem: cannot observe") == 1, shown.stderr

    plain = watch_once(cluster)  # the view: the problem once, the probe's result on the engine line
    assert plain.returncode == 1, plain.stderr + plain.stdout
    said = plain.stdout + plain.stderr
    assert said.count(f"problem: cannot observe rank {rank} on {node}") == 1, said
    assert "a 1-token completion came back" in said and "is gone" not in said, said
    assert f"named {names[rank]}" in said, said


def test_watch_says_a_rank_it_cannot_observe_is_unobserved_and_still_probes(pair, tmp_path):
    cluster = pair
    forget_releases(cluster)
    up = spark_deploy("up", recipe_variant(cluster, tmp_path / "a.yaml"), "-i", cluster.inventory_path, timeout=600)
    assert up.returncode == 0, up.stderr + up.stdout

    healthy = watch_once(cluster, "--json")
    assert healthy.returncode == 0, healthy.stderr + healthy.stdout
    ranks = cli_json.result(healthy.stdout)["ranks"]
    names = {r["rank"]: r["name"] for r in ranks}
    for r in ranks:  # a real ID (what `docker inspect` on the node answers), not a name cut to 12 characters
        inspected = cluster.exec(r["node"], ["docker", "inspect", "--format", "{{.Id}} {{.Name}}", r["container"]]).stdout
        assert inspected.split() == [r["container"], "/" + r["name"]], inspected

    cluster.fault(2, "partition", net="management")
    try:
        completion(cluster)  # it serves: the fabric between the ranks is whole
        assert_unobservable(cluster, 1, "spark-2", names)
    finally:
        cluster.fault(2, "heal")

    cluster.fault(1, "stop-sshd")
    try:
        assert_unobservable(cluster, 0, "spark-1", names)
    finally:
        cluster.fault(1, "start-sshd")
    assert watch_once(cluster).returncode == 0
