"""`restart` on the simulated cluster (issue 40, acceptance 5): a rank SIGKILLed by hand (`docker kill`, as the
OOM killer does) leaves the group not serving; `restart` stops the survivor, starts the same containers head
first with every wait, and the release serves again; one `restart` audit line names the dead rank and its
exit code. With the crash-loop fault the restart fails, leaves no half group, says nothing serves and names
`rollback`, and the lock is free. Real sshd, dockerd, stand-in and HTTP; the real CLI in subprocesses."""

from __future__ import annotations

import json
import re

import pytest

from deploy_helpers import SUDOERS, completion, forget_releases, node_docker, recipe_variant, spark_deploy

from orchestrator.config.load import load_inventory
from orchestrator.render.unit import unit_name

from orchestrator.sim.node_memory import FLOOR_KB, SPARK
from orchestrator.sim.standin.memory import GIB_KB, RUNTIME_OVERHEAD_GIB
import cli_json

pytestmark = pytest.mark.integration


def ours(cluster, node: int) -> dict[str, dict]:
    """ID -> State of every spark-deploy container on the node, running or not."""
    ids = node_docker(cluster, node, "ps", "-aq", "--no-trunc", "--filter", "label=spark-deploy.managed=true",
                      check=True).stdout.split()
    data = json.loads(node_docker(cluster, node, "inspect", *ids, check=True).stdout) if ids else []
    return {d["Id"]: d["State"] for d in data}


def running(cluster, node: int) -> list[str]:
    return [cid for cid, state in ours(cluster, node).items() if state["Running"]]


def audit(cluster) -> list[dict]:
    result = spark_deploy("audit", "-i", cluster.inventory_path, "--json")
    assert result.returncode == 0, result.stderr
    return cli_json.result(result.stdout)


def up(cluster, recipe) -> None:
    result = spark_deploy("up", str(recipe), "-i", cluster.inventory_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


def kill_rank_1(cluster) -> str:
    """SIGKILL the peer's container (rank 1 on the second node), as the OOM killer would; its ID."""
    (peer,) = running(cluster, 2)
    node_docker(cluster, 2, "kill", peer, check=True)
    assert ours(cluster, 2)[peer]["ExitCode"] == 137
    return peer


@pytest.fixture
def fresh(pair):
    forget_releases(pair)
    return pair


def test_restart_brings_a_group_with_a_dead_rank_back(fresh):
    cluster = fresh
    up(cluster, cluster.recipe_path)
    head_before = running(cluster, 1)
    peer = kill_rank_1(cluster)
    broken = spark_deploy("status", "-i", cluster.inventory_path)
    assert broken.returncode == 1, broken.stdout + broken.stderr  # a dead rank: not serving
    lines = len(audit(cluster))

    result = spark_deploy("restart", "-i", cluster.inventory_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr
    spark2 = cluster.node(2).name
    assert f"rank 1 on {spark2} exited (exit 137)" in result.stdout + result.stderr
    assert "serving" in result.stdout and "release 1 again" in result.stdout, result.stdout

    # the same containers, each running again (the survivor too: a group cannot take one rank back)
    assert running(cluster, 2) == [peer]
    assert running(cluster, 1) == head_before
    status = spark_deploy("status", "-i", cluster.inventory_path)
    assert status.returncode == 0, status.stdout + status.stderr
    assert completion(cluster)

    new = audit(cluster)[lines:]
    assert [line["action"] for line in new] == ["restart"], new
    (line,) = new
    assert line["outcome"] == "ok" and line["release"] == 1, line
    assert f"rank 1 on {spark2} exited (exit 137)" in line["detail"], line
    assert re.search(r"; rank 1 down \d+ s$", line["detail"]), line  # from its stop to serving again

    # the release is still the one serving: no new release record
    hist = cli_json.result(spark_deploy("history", "-i", cluster.inventory_path, "--json").stdout)
    assert [(r["id"], r["serving"]) for r in hist] == [(1, True)]


def test_a_rank_earlyoom_killed_is_restarted_with_earlyoom_named(fresh):
    """Real earlyoom (-m 10) on the head's node; the node's idle memory lowered under the serving release
    until memory and swap are both under earlyoom's SIGKILL line (5%), within swap (the kernel's OOM killer
    is not reached): earlyoom SIGKILLs rank 0. Memory back, `restart` names earlyoom as the likely cause."""
    cluster = fresh
    up(cluster, cluster.recipe_path)
    (head,) = running(cluster, 1)
    total, swap = SPARK["MemTotal"], SPARK["SwapTotal"]
    claimed = int(0.7 * total) + int(RUNTIME_OVERHEAD_GIB * GIB_KB)  # the sim recipe's share and its runtime
    spill = int(0.975 * swap)  # 2.5% swap left; MemAvailable at the kernel's floor (0.4%)
    try:
        cluster.fault("spark-1", "earlyoom", m="10")
        cluster.fault("spark-1", "meminfo", available=str(claimed + FLOOR_KB - spill))
        waited = cluster.exec(1, ["timeout", "60", "docker", "wait", head], check=False)  # when earlyoom killed it
        assert waited.stdout.strip() == "137", waited.stdout + waited.stderr
        log = cluster.exec(1, ["cat", "/var/log/sim-earlyoom.log"]).stdout
        assert "sending SIGKILL to process" in log, log
        cluster.fault("spark-1", "meminfo", reset="true")  # the pressure gone; earlyoom still runs

        result = spark_deploy("restart", "-i", cluster.inventory_path, timeout=600)
        said = result.stdout + result.stderr
        assert result.returncode == 0, said
        spark1 = cluster.node(1).name
        assert f"rank 0 on {spark1} exited (exit 137): earlyoom runs on {spark1} (earlyoom -m 10" in said, said
        (line,) = audit(cluster)[-1:]
        assert line["action"] == "restart" and line["outcome"] == "ok", line
        assert f"rank 0 on {spark1} exited (exit 137): earlyoom runs on {spark1}" in line["detail"], line
        assert spark_deploy("status", "-i", cluster.inventory_path).returncode == 0
    finally:
        cluster.fault("spark-1", "earlyoom", stop="true")
        cluster.fault("spark-1", "meminfo", reset="true")


def test_the_boot_units_watch_their_ranks_again_after_a_restart(systemd_pair):
    """On systemd nodes with `boot enable`: each unit is attached to its rank's container; the restart's stop
    ends that attach, and the restart starts the units again, so they go on watching."""
    cluster = systemd_pair
    forget_releases(cluster)
    inv = cluster.inventory_path
    up(cluster, cluster.recipe_path)
    for n in (1, 2):  # the login gets passwordless sudo, as docs/boot.md asks
        cluster.exec(n, ["sh", "-c", 'printf "%s\\n" "spark ALL=(root) NOPASSWD: ALL" > "$1" && chmod 0440 "$1"',
                         "sh", SUDOERS])
    name = unit_name(load_inventory(inv)[0].cluster, "sim-tiny")
    try:
        enabled = spark_deploy("boot", "enable", str(cluster.recipe_path), "-i", inv, "--yes", timeout=600)
        assert enabled.returncode == 0, enabled.stdout + enabled.stderr
        assert [active(cluster, n, name) for n in (1, 2)] == ["active", "active"]
        kill_rank_1(cluster)

        result = spark_deploy("restart", "-i", inv, timeout=600)
        assert result.returncode == 0, result.stdout + result.stderr
        assert [active(cluster, n, name) for n in (1, 2)] == ["active", "active"], result.stdout + result.stderr
        (line,) = audit(cluster)[-1:]
        nodes = ", ".join(cluster.node(n).name for n in (1, 2))
        assert line["action"] == "restart" and f"boot units watch again on {nodes}" in line["detail"], line
        assert spark_deploy("status", "-i", inv).returncode == 0
    finally:
        spark_deploy("boot", "disable", "-i", inv, timeout=600)
        for n in (1, 2):
            cluster.exec(n, ["rm", "-f", SUDOERS])


def active(cluster, node: int, unit: str) -> str:
    return cluster.exec(node, ["systemctl", "is-active", unit], check=False).stdout.strip()


def test_restart_refuses_another_recipe_and_nothing_serving(fresh, tmp_path):
    cluster = fresh
    nothing = spark_deploy("restart", "-i", cluster.inventory_path)
    assert nothing.returncode == 1 and "nothing to restart" in nothing.stderr, nothing.stderr
    up(cluster, cluster.recipe_path)
    other = tmp_path / "other.yaml"
    other.write_text(cluster.recipe_path.read_text().replace("\nname: sim-tiny\n", "\nname: other\n", 1))
    assert "name: other" in other.read_text()
    refused = spark_deploy("restart", str(other), "-i", cluster.inventory_path)
    assert refused.returncode == 1 and "not 'other'" in refused.stderr, refused.stderr
    assert [line["outcome"] for line in audit(cluster)][-1] == "refused"


def test_a_crash_loop_fails_the_restart_as_a_whole_and_names_rollback(fresh, tmp_path):
    cluster = fresh
    recipe = recipe_variant(cluster, tmp_path / "crashy.yaml", env={"SIM_FAULT_CRASH_AFTER_STARTS": "1"})
    up(cluster, recipe)  # start 1 of every rank: it serves
    kill_rank_1(cluster)

    result = spark_deploy("restart", str(recipe), "-i", cluster.inventory_path, timeout=600)
    assert result.returncode == 1, result.stdout + result.stderr
    said = result.stdout + result.stderr
    assert "nothing serves" in said and "spark-deploy rollback 1" in said, said
    assert running(cluster, 1) == [] and running(cluster, 2) == []  # never half a group
    (line,) = audit(cluster)[-1:]
    assert line["action"] == "restart" and line["outcome"] == "failed" and "nothing serves" in line["detail"], line
    lock = spark_deploy("lock", "-i", cluster.inventory_path, "--json")
    assert cli_json.result(lock.stdout)["held"] is False, lock.stdout

