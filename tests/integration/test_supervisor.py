"""The group supervisor on the simulated systemd cluster (issue 40, acceptance 1-4): `supervise enable` installs
it on the head node under systemd; no controller command runs while it works. A rank SIGKILLed comes back as a
whole group with one `recover` audit line (rank, exit code, time down); a held deploy lock is waited for, never
broken; the crash-loop fault is stopped after the bound, `status` exits 1 naming it and `rollback` serves the
release before; earlyoom killing rank 0 is recovered with earlyoom named. Real sshd, dockerd, systemd, node-to-node
SSH, stand-in and HTTP; the real CLI in subprocesses."""

from __future__ import annotations

import json
import time

import pytest

from deploy_helpers import (SUDOERS, completion, forget_releases, node_docker, recipe_variant, spark_deploy,
                            wait_for)

import cli_json
from orchestrator.cli.json_contract import iso
from orchestrator.config.load import load_inventory
from orchestrator.releases.audit import audit_path
from orchestrator.releases.lock import DeployLock, lock_path
from orchestrator.render.supervisor import supervisor_unit_name
from orchestrator.sim.node_memory import FLOOR_KB, SPARK
from orchestrator.sim.standin.memory import GIB_KB, RUNTIME_OVERHEAD_GIB
from orchestrator.transport.group import Cluster

pytestmark = pytest.mark.integration

LOAD_S = 60  # the stand-in's load and rendezvous on a loaded 2-core machine
BOUND_S = LOAD_S + 60  # acceptance 1: serving again within 60 s beyond the load (+ one look of 1 s)


def states(cluster, node: int) -> dict[str, dict]:
    """Name -> State of every spark-deploy container on the node."""
    ids = node_docker(cluster, node, "ps", "-aq", "--no-trunc", "--filter", "label=spark-deploy.managed=true",
                      check=True).stdout.split()
    data = json.loads(node_docker(cluster, node, "inspect", *ids, check=True).stdout) if ids else []
    return {d["Name"].lstrip("/"): d["State"] for d in data}


def running(cluster, node: int) -> list[str]:
    return sorted(name for name, s in states(cluster, node).items() if s["Running"])


def recovers(cluster) -> list[dict]:
    """The head's audit lines the supervisor wrote."""
    inv = load_inventory(cluster.inventory_path)[0]
    text = cluster.exec(1, ["cat", audit_path(inv, inv.head)], check=False).stdout
    return [line for line in map(json.loads, text.splitlines()) if line.get("action") == "recover"]


def supervisor_state(cluster) -> dict:
    got = spark_deploy("supervise", "status", "-i", cluster.inventory_path, "--json")
    return cli_json.result(got.stdout)


def up(cluster, recipe) -> None:
    result = spark_deploy("up", str(recipe), "-i", cluster.inventory_path, timeout=600)
    assert result.returncode == 0, result.stdout + result.stderr


@pytest.fixture
def supervised(systemd_pair):
    """The systemd pair with the login allowed `sudo -n` on the head (docs/boot.md), no history; the
    supervisor removed and the sudoers file gone afterwards."""
    cluster = systemd_pair
    forget_releases(cluster)
    cluster.exec(1, ["sh", "-c", 'printf "%s\\n" "spark ALL=(root) NOPASSWD: ALL" > "$1" && chmod 0440 "$1"',
                     "sh", SUDOERS])
    try:
        yield cluster
    finally:
        spark_deploy("supervise", "disable", "-i", cluster.inventory_path, timeout=300)
        cluster.exec(1, ["rm", "-f", SUDOERS])


def enable(cluster, *extra: str) -> None:
    result = spark_deploy("supervise", "enable", "-i", cluster.inventory_path, "--interval", "1", *extra,
                          timeout=300)
    assert result.returncode == 0, result.stdout + result.stderr
    unit = supervisor_unit_name(load_inventory(cluster.inventory_path)[0].cluster)
    assert cluster.exec(1, ["systemctl", "is-active", unit], check=False).stdout.strip() == "active"
    wait_for("the supervisor's first look", lambda: supervisor_state(cluster)["status"] == "watching", 60)


def kill_rank_1(cluster) -> str:
    """SIGKILL the peer's container process (rank 1 on spark-2), as the OOM killer would; its name."""
    (peer,) = running(cluster, 2)
    node_docker(cluster, 2, "kill", "--signal", "KILL", peer, check=True)
    assert states(cluster, 2)[peer]["ExitCode"] == 137
    return peer


def test_a_sigkilled_rank_brings_the_whole_group_back(supervised):
    """Acceptance 1: no controller command runs; rank 1 SIGKILLed -> serving again within the bound, one
    audit line naming rank 1, exit 137 and the time down."""
    cluster = supervised
    up(cluster, cluster.recipe_path)
    enable(cluster)
    head_started = states(cluster, 1)[running(cluster, 1)[0]]["StartedAt"]
    killed = time.monotonic()
    peer = kill_rank_1(cluster)

    (line,) = wait_for("a recover audit line", lambda: recovers(cluster), BOUND_S)
    assert time.monotonic() - killed <= BOUND_S
    spark2 = cluster.node(2).name
    assert line["outcome"] == "ok" and line["release"] == 1, line
    assert (line["rank"], line["exit_code"], line["attempt"]) == (1, 137, 1), line
    assert line["down_seconds"] > 0 and f"rank 1 on {spark2} exited (exit 137)" in line["detail"], line
    assert "down " in line["detail"] and "serves again" in line["detail"], line
    assert completion(cluster)
    assert running(cluster, 2) == [peer]  # the same container, started again
    (head,) = running(cluster, 1)
    assert states(cluster, 1)[head]["StartedAt"] != head_started  # the survivor restarted too: a whole group
    status = spark_deploy("status", "-i", cluster.inventory_path)
    assert status.returncode == 0, status.stdout + status.stderr
    assert "1 recovery, last: rank 1 exit 137" in status.stdout, status.stdout
    history = spark_deploy("history", "-i", cluster.inventory_path, "--json")
    assert history.returncode == 0, history.stdout + history.stderr
    (release,) = cli_json.result(history.stdout)
    got = release["recoveries"]  # from the supervisor's audit lines on the nodes
    assert (got["recovered"], got["failed"], got["last_rank"], got["last_exit_code"]) == (1, 0, 1, 137), got
    assert got["last_at"] == iso(line["at"]) and got["last_down_seconds"] == line["down_seconds"], got
    assert got["crash_loop"] == "", got
    lock = cli_json.result(spark_deploy("lock", "-i", cluster.inventory_path, "--json").stdout)
    assert lock["held"] is False, lock


def test_a_held_deploy_lock_is_waited_for_never_broken(supervised):
    """Acceptance 4: a command holds the deploy lock (a real DeployLock, as `up` takes it); rank 1 dies; the
    supervisor says it waits for the lock and touches nothing; the lock is the holder's until released;
    then it recovers."""
    cluster = supervised
    up(cluster, cluster.recipe_path)
    enable(cluster)
    inv = load_inventory(cluster.inventory_path)[0]
    conns = Cluster(inv).open()
    try:
        holder = DeployLock(conns.head, inv, ["spark-deploy", "up", "held-by-test"], ttl=600).acquire()
        held_text = cluster.exec(1, ["cat", lock_path(inv)]).stdout
        (head,) = running(cluster, 1)
        head_started = states(cluster, 1)[head]["StartedAt"]
        kill_rank_1(cluster)
        said = wait_for("the supervisor's third look at the held lock",
                        lambda: (s := supervisor_state(cluster))["status"] == "waiting-lock" and "(look 3)" in
                        s["detail"] and s, 90)
        assert "held-by-test" in said["detail"], said
        # it waits: still the holder's lock, nothing started or stopped
        assert cluster.exec(1, ["cat", lock_path(inv)]).stdout == held_text
        assert states(cluster, 1)[head]["StartedAt"] == head_started and running(cluster, 2) == []
        assert recovers(cluster) == []
        holder.release()
    finally:
        conns.close()
    (line,) = wait_for("the recovery once the lock is free", lambda: recovers(cluster), BOUND_S)
    assert line["outcome"] == "ok" and line["rank"] == 1, line
    assert completion(cluster)


def test_a_crash_loop_is_stopped_after_the_bound_and_rollback_serves(supervised, tmp_path):
    """Acceptance 3: release 2 dies at every start after its first; after 2 attempts every rank is stopped
    (never half a group), `status` exits 1 naming the crash loop and its cause, the lock is free, and
    `rollback 1` serves release 1's plan again."""
    cluster = supervised
    up(cluster, cluster.recipe_path)  # release 1
    crashy = recipe_variant(cluster, tmp_path / "crashy.yaml", env={"SIM_FAULT_CRASH_AFTER_STARTS": "1"})
    up(cluster, crashy)  # release 2: start 1 of every rank serves
    enable(cluster, "--attempts", "2")
    kill_rank_1(cluster)

    wait_for("the crash loop recorded", lambda: supervisor_state(cluster)["status"] == "crash-looped", 300)
    lines = recovers(cluster)
    assert [(l["outcome"], l.get("attempt")) for l in lines] == [("failed", 1), ("failed", 2), ("crash-loop", 2)], lines
    assert all(l["release"] == 2 for l in lines)
    assert running(cluster, 1) == [] and running(cluster, 2) == []  # never half a group
    status = spark_deploy("status", "-i", cluster.inventory_path)
    assert status.returncode == 1, status.stdout + status.stderr
    said = status.stdout + status.stderr
    assert "crash loop" in said and "release 2 crash-looped: stopped after 2 restart attempts" in said, said
    assert "exited (exit 1)" in said, said  # the last cause: a rank exiting at its start
    history = spark_deploy("history", "-i", cluster.inventory_path, "--json")
    assert history.returncode == 0, history.stdout + history.stderr
    got = {r["id"]: r["recoveries"] for r in cli_json.result(history.stdout)}
    assert got[1] is None and (got[2]["recovered"], got[2]["failed"]) == (0, 2), got
    assert got[2]["crash_loop"] == lines[-1]["detail"], got
    lock = cli_json.result(spark_deploy("lock", "-i", cluster.inventory_path, "--json").stdout)
    assert lock["held"] is False, lock

    back = spark_deploy("rollback", "1", "-i", cluster.inventory_path, timeout=600)
    assert back.returncode == 0, back.stdout + back.stderr
    assert completion(cluster)
    assert spark_deploy("status", "-i", cluster.inventory_path).returncode == 0


def test_earlyoom_killing_rank_0_is_recovered_with_earlyoom_named(supervised):
    """Acceptance 2: real earlyoom (-m 10) on the head's node; memory pressure until it SIGKILLs rank 0; the
    pressure gone, the supervisor brings the group back and names earlyoom as the cause."""
    cluster = supervised
    up(cluster, cluster.recipe_path)
    enable(cluster, "--probe-every", "0")
    (head,) = running(cluster, 1)
    total, swap = SPARK["MemTotal"], SPARK["SwapTotal"]
    claimed = int(0.7 * total) + int(RUNTIME_OVERHEAD_GIB * GIB_KB)
    spill = int(0.975 * swap)
    try:
        cluster.fault("spark-1", "earlyoom", m="10")
        cluster.fault("spark-1", "meminfo", available=str(claimed + FLOOR_KB - spill))
        waited = cluster.exec(1, ["timeout", "60", "docker", "wait", head], check=False)
        assert waited.stdout.strip() == "137", waited.stdout + waited.stderr
        cluster.fault("spark-1", "meminfo", reset="true")
        (line,) = wait_for("a recover audit line", lambda: recovers(cluster), BOUND_S)
        journal = cluster.exec(1, ["journalctl", "-u", supervisor_unit_name(load_inventory(
            cluster.inventory_path)[0].cluster), "--no-pager"], check=False).stdout
        assert line["outcome"] == "ok" and (line["rank"], line["exit_code"]) == (0, 137), (line, journal)
        assert line["cause"].startswith("earlyoom (") and "SIGKILL" in line["cause"], line  # its kill line
        assert "earlyoom" in spark_deploy("status", "-i", cluster.inventory_path).stdout
        assert completion(cluster)
    finally:
        cluster.fault("spark-1", "earlyoom", stop="true")
        cluster.fault("spark-1", "meminfo", reset="true")


def test_an_engine_that_stops_generating_is_found_by_the_probe_and_restarted(supervised):
    """Every container runs and /health answers, but the head's scheduler is stuck (`sim fault spark-1
    stall`): the completion probe (every 2 looks) fails and the group is restarted, the probe's failure named."""
    cluster = supervised
    up(cluster, cluster.recipe_path)
    enable(cluster, "--probe-every", "2")
    (head,) = running(cluster, 1)
    started = states(cluster, 1)[head]["StartedAt"]
    cluster.fault("spark-1", "stall")
    (line,) = wait_for("a recover audit line", lambda: recovers(cluster), BOUND_S + 30)  # + the probe's 30 s
    assert line["outcome"] == "ok" and line["rank"] == 0, line
    assert line["cause"].startswith("the completion probe failed"), line
    assert states(cluster, 1)[head]["StartedAt"] != started
    assert completion(cluster)
