"""Releases on the simulated cluster (issue 9): history on the nodes, automatic restore, rollback, the
deploy lock, the audit log. Real sshd, dockerd, stand-in and HTTP; the real CLI in subprocesses."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess

import pytest

from deploy_helpers import forget_releases, CLI, completion, node_docker, recipe_variant, spark_deploy
from image_variants import derive_image

from orchestrator.docker_cli.disk import parse_human_size
from orchestrator.sim.state import NODE_HF_CACHE, NODE_STATE_DIR
import cli_json

pytestmark = pytest.mark.integration

SECRET_MARKER = "hf_SECRETMARKER9f3c1d77"


@pytest.fixture
def fresh(clean):
    """`clean`, and no release history, audit or lock on the nodes: release numbers start at 1."""
    forget_releases(clean)
    return clean


def history(cluster) -> list[dict]:
    result = spark_deploy("history", "-i", cluster.inventory_path, "--json")
    assert result.returncode == 0, result.stderr + result.stdout
    return cli_json.result(result.stdout)


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


def up(cluster, recipe, *extra, env=None):
    return spark_deploy("up", recipe, "-i", cluster.inventory_path, *extra, env=env, timeout=600)


def up_in_turn(cluster, *recipes) -> None:
    """Each recipe deployed after the other, each up succeeding: one release each, the last serving."""
    for recipe in recipes:
        result = up(cluster, recipe)
        assert result.returncode == 0, result.stderr + result.stdout


def test_a_failed_up_restores_the_serving_release_and_history_says_so(fresh, tmp_path):
    cluster = fresh
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

    refused = up(cluster, a3)  # vLLM's table refuses the flag, as validate does: before any node is contacted
    assert refused.returncode == 2 and "vllm.extra.no-such-flag" in refused.stderr, refused.stderr
    third = up(cluster, a3, "--skip-check", "vllm-flags")  # past every flag check: the head's parser refuses it
    if os.environ.get("SHOW_OUTPUT"):
        print(second.stdout, third.stdout, third.stderr, spark_deploy("history", "-i", cluster.inventory_path).stdout,
              spark_deploy("audit", "-i", cluster.inventory_path).stdout, sep="\n-----\n")
    assert third.returncode == 1, third.stderr + third.stdout
    assert "no-such-flag" in third.stderr, third.stderr
    assert "release 2 serves again" in third.stderr, third.stderr
    assert plan_hashes(cluster) == release2_hash, "release 2's containers must be the ones running"
    assert completion(cluster)

    records = history(cluster)
    assert [r["id"] for r in records] == [3, 2, 1], "a refusal before preflight opens no release"
    by_id = {r["id"]: r for r in records}
    assert by_id[1]["outcome"] == "superseded"
    assert by_id[2]["outcome"] == "serving" and by_id[2]["serving"] is True
    assert by_id[3]["outcome"] == "failed" and by_id[3]["restored"] == 2 and by_id[3]["failed_phase"] == "rendezvous"
    assert not by_id[1]["serving"] and not by_id[3]["serving"]
    assert by_id[2]["plan_hash"] in release2_hash
    status = spark_deploy("status", "-i", cluster.inventory_path, "--json")
    assert status.returncode == 0, status.stderr
    assert [d["release"] for d in cli_json.result(status.stdout)["deployments"]] == [2]
    lines = cli_json.result(spark_deploy("audit", "-i", cluster.inventory_path, "--json").stdout)
    assert [(l["action"], l.get("release"), l["outcome"]) for l in lines] == [
        ("up", 1, "serving"), ("up", 2, "serving"), ("up", 3, "failed")]  # the refusal contacted no node


def record_on(cluster, node: int, release: int) -> dict:
    path = f"{NODE_STATE_DIR}/releases/sim-{cluster.name}/{release:06d}.json"
    return json.loads(cluster.exec(node, ["cat", path]).stdout)


def started_at(cluster) -> dict[str, str]:
    return {name: d["State"]["StartedAt"] for n in (1, 2) for name, d in running(cluster, n).items()}


def image_recipe(cluster, dest, tag: str, image_id: str, **kw):
    from ruamel.yaml import YAML

    path = recipe_variant(cluster, dest, **kw)
    yaml = YAML()
    doc = yaml.load(path.read_text())
    doc["image"]["ref"], doc["image"]["id"] = tag, image_id
    with path.open("w") as handle:
        yaml.dump(doc, handle)
    return path


def names_by_id(cluster) -> dict[str, tuple[str, str]]:
    """Container ID -> (name as `docker inspect` gives it, plan-hash label), every container of ours on both nodes."""
    out = {}
    for node in (1, 2):
        ids = node_docker(cluster, node, "ps", "-aq", "--no-trunc", "--filter", "label=spark-deploy.managed=true",
                          check=True).stdout.split()
        for d in json.loads(node_docker(cluster, node, "inspect", *ids, check=True).stdout) if ids else []:
            out[d["Id"]] = (d["Name"].lstrip("/"), d["Config"]["Labels"]["spark-deploy.plan-hash"])
    return out


def renames(cluster, since: str) -> list[str]:
    """Every `rename` event dockerd recorded on either node since `since` (unix seconds)."""
    until = cluster.exec(1, ["date", "+%s"]).stdout.strip()
    return [line for node in (1, 2) for line in node_docker(
        cluster, node, "events", "--since", since, "--until", str(int(until) + 1), "--filter", "type=container",
        "--filter", "event=rename", "--format", "{{.Actor.Attributes.oldName}} -> {{.Actor.Attributes.name}}",
        check=True).stdout.splitlines() if line]


def assert_named_by_plan(seen: dict[str, tuple[str, str]]) -> None:
    """The plan is readable from every name: `sd-sim-tiny-rN-HASH8`, a run ID after it only for a redeploy."""
    for name, plan in seen.values():
        assert re.fullmatch(rf"sd-sim-tiny-r[01]-{plan[:8]}(-\d{{8}}T\d{{6}}Z-[0-9a-f]{{6}})?", name), (name, plan)


def test_rollback_serves_the_recorded_argv_and_refuses_when_a_node_lost_the_image(fresh, tmp_path):
    """Also issue 19 acceptance 3: through up A, up B, rollback to A (the kept containers started again),
    up C, up A again (A's names held by its kept containers: this run's carry the run ID), no container
    is ever renamed — dockerd records no rename event, and each keeps the name it was created with."""
    cluster = fresh
    since = cluster.exec(1, ["date", "+%s"]).stdout.strip()
    v2 = derive_image(cluster, 1, "vllm-sim:latest", "vllm-sim:rollback-v2", extra_mb=4)
    a = recipe_variant(cluster, tmp_path / "a.yaml")
    b = recipe_variant(cluster, tmp_path / "b.yaml", vllm={"max_model_len": 2048})
    c = image_recipe(cluster, tmp_path / "c.yaml", "vllm-sim:rollback-v2", v2, vllm={"max_model_len": 1024})
    up_in_turn(cluster, a)
    created = names_by_id(cluster)
    up_in_turn(cluster, b)
    created |= {i: n for i, n in names_by_id(cluster).items() if i not in created}
    assert len(created) == 4 and len({p for _, p in created.values()}) == 2, created
    assert_named_by_plan(created)

    back = spark_deploy("rollback", "1", "-i", cluster.inventory_path, timeout=600)
    assert back.returncode == 0, back.stderr + back.stdout
    assert "started again, not re-created" in back.stdout
    assert names_by_id(cluster) == created, "every container keeps the name it was created with"
    assert renames(cluster, since) == []
    records = {r["id"]: r for r in history(cluster)}
    assert records[3]["rollback_of"] == 1 and records[3]["serving"] is True
    assert records[3]["plan_hash"] == records[1]["plan_hash"]
    assert records[2]["outcome"] == "rolled back"
    recorded = record_on(cluster, 1, 1)
    for rank in recorded["ranks"]:
        node = 1 if rank["rank"] == 0 else 2
        live = running(cluster, node)[rank["container"]]
        argv = rank["argv"]
        assert live["Config"]["Cmd"] == argv[argv.index(recorded["image_id"]) + 1:], "the recorded argv must run"
        assert live["Config"]["Labels"]["spark-deploy.run"] == recorded["run_id"], "started again, not re-created"
    assert completion(cluster)

    # release 4 runs the derived image; release 5 goes back to a: release 4's containers are kept, stopped
    up_in_turn(cluster, c, a)
    now = names_by_id(cluster)
    assert all(now[i] == n for i, n in created.items()) and len(now) == 8, now
    assert_named_by_plan(now)
    again = [n for i, (n, p) in now.items() if i not in created and p == records[1]["plan_hash"]]
    assert len(again) == 2 and all(n.count("-") > 4 for n in again), f"release 5 carries its run ID: {again}"
    assert renames(cluster, since) == []
    kept = node_docker(cluster, 2, "ps", "-aq", "--filter", f"ancestor={v2}", check=True).stdout.split()
    assert kept, "release 4's container must be kept on node 2"
    node_docker(cluster, 2, "rm", *kept, check=True)
    node_docker(cluster, 2, "rmi", v2, check=True)
    before, hashes = started_at(cluster), plan_hashes(cluster)

    refused = spark_deploy("rollback", "4", "-i", cluster.inventory_path, timeout=600)
    assert refused.returncode == 1, refused.stderr + refused.stdout
    assert "spark-2" in refused.stderr and v2 in refused.stderr, refused.stderr
    assert "nothing was stopped" in refused.stderr
    assert started_at(cluster) == before and plan_hashes(cluster) == hashes, "nothing may be touched"
    node_docker(cluster, 1, "rmi", "-f", "vllm-sim:rollback-v2")


def test_sigint_during_the_ready_wait_serves_the_previous_release_again(fresh, tmp_path):
    cluster = fresh
    a = recipe_variant(cluster, tmp_path / "a.yaml")
    slow = recipe_variant(cluster, tmp_path / "slow.yaml", vllm={"max_model_len": 2048},
                          env={"SIM_LOAD_SECONDS": "60"})
    first = up(cluster, a)
    assert first.returncode == 0, first.stderr + first.stdout
    serving = plan_hashes(cluster)

    proc = subprocess.Popen([*CLI, "up", str(slow), "-i", str(cluster.inventory_path), "--json"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "COLUMNS": "200"})
    try:
        for line in proc.stdout:
            event = json.loads(line)
            if event.get("event") == "phase-start" and event.get("phase") == "ready":
                break
        else:
            pytest.fail("the up never reached the ready wait: " + proc.stderr.read())
        proc.send_signal(signal.SIGINT)
        rest, err = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    final = cli_json.result(rest)  # the stream's rest, its last line the envelope
    assert final["ok"] is False and final["restored"] == 1, final
    assert plan_hashes(cluster) == serving
    assert completion(cluster)
    records = {r["id"]: r for r in history(cluster)}
    assert records[1]["serving"] and records[1]["outcome"] == "serving"
    assert records[2]["outcome"] == "failed" and records[2]["restored"] == 1


def test_prune_frees_what_it_reports_and_never_touches_the_serving_release(fresh, tmp_path):
    cluster = fresh
    old = derive_image(cluster, 1, "vllm-sim:latest", "vllm-sim:prune-old", extra_mb=24)
    c = image_recipe(cluster, tmp_path / "c.yaml", "vllm-sim:prune-old", old, vllm={"max_model_len": 1024})
    a = recipe_variant(cluster, tmp_path / "a.yaml")
    up_in_turn(cluster, c, a)
    serving_before = started_at(cluster)

    def df_total(node: int) -> int:
        out = node_docker(cluster, node, "system", "df", "--format", "{{.Size}}", check=True).stdout.split()
        return sum(parse_human_size(x) for x in out)

    before = {n: df_total(n) for n in (1, 2)}
    pruned = spark_deploy("prune", "--keep", "1", "-i", cluster.inventory_path, "--json")
    assert pruned.returncode == 0, pruned.stderr + pruned.stdout
    report = cli_json.result(pruned.stdout)
    assert report["ok"] is True, report
    after = {n: df_total(n) for n in (1, 2)}
    measured = sum(before[n] - after[n] for n in (1, 2))
    # the old image's own 24 MB layer on both nodes; docker prints sizes to 3-4 digits (115.9MB - 91.92MB)
    assert report["freed_bytes"] >= 2 * 23_900_000, report
    assert abs(report["freed_bytes"] - measured) <= 0.01 * measured + 200_000, (report, before, after)
    for node in (1, 2):
        assert node_docker(cluster, node, "image", "inspect", old).code != 0, "the old image must be gone"
    assert started_at(cluster) == serving_before, "the serving release must not be touched"
    assert completion(cluster)


def test_rollback_shows_an_inventory_change_and_refuses_a_moved_model(fresh, tmp_path):
    from ruamel.yaml import YAML

    cluster = fresh
    a = recipe_variant(cluster, tmp_path / "a.yaml")
    b = recipe_variant(cluster, tmp_path / "b.yaml", vllm={"max_model_len": 2048})
    up_in_turn(cluster, a, b)
    yaml = YAML()
    doc = yaml.load(cluster.inventory_path.read_text())
    doc["nodes"][1].setdefault("env", {})["NCCL_DEBUG"] = "WARN"
    changed = tmp_path / "inventory.yaml"
    with changed.open("w") as handle:
        yaml.dump(doc, handle)
    before = started_at(cluster)

    asked = spark_deploy("rollback", "1", "-i", changed, timeout=600)
    assert asked.returncode == 1, asked.stderr + asked.stdout
    assert "the inventory changed since release 1" in asked.stderr and "NCCL_DEBUG=WARN" in asked.stderr
    assert "--yes" in asked.stderr
    assert started_at(cluster) == before, "nothing may be touched before --yes"

    done = spark_deploy("rollback", "1", "-i", changed, "--yes", timeout=600)
    assert done.returncode == 0, done.stderr + done.stdout
    records = {r["id"]: r for r in history(cluster)}
    assert records[3]["rollback_of"] == 1 and records[3]["serving"]
    assert records[3]["plan_hash"] != records[1]["plan_hash"], "today's inventory makes another plan"
    peer = running(cluster, 2)
    assert list(peer) == [f"sd-sim-tiny-r1-{records[3]['plan_hash'][:8]}"], "named by today's plan"
    assert "NCCL_DEBUG=WARN" in json.dumps(peer[f"sd-sim-tiny-r1-{records[3]['plan_hash'][:8]}"]["Config"]["Env"])

    ref = f"{NODE_HF_CACHE}/hub/models--sim--tiny-moe/refs/main"
    original = cluster.exec(2, ["cat", ref]).stdout
    cluster.exec(2, ["sh", "-c", f"printf %s {'0' * 40} > {ref}"])
    try:
        before = started_at(cluster)
        refused = spark_deploy("rollback", "2", "-i", changed, "--yes", timeout=600)
        assert refused.returncode == 1, refused.stderr + refused.stdout
        assert "spark-2" in refused.stderr and "sim/tiny-moe@main" in refused.stderr, refused.stderr
        assert "nothing was stopped" in refused.stderr
        assert started_at(cluster) == before
    finally:
        cluster.exec(2, ["sh", "-c", f"printf %s {original.strip()} > {ref}"])


def test_a_restore_that_fails_too_says_so_loudly_with_both_causes(fresh, tmp_path):
    """The model vanishes from node 2 under a serving release: the new release's peer cannot load it, and
    neither can the restarted old one. Both causes are named and the record says the restore failed."""
    cluster = fresh
    a = recipe_variant(cluster, tmp_path / "a.yaml")
    b = recipe_variant(cluster, tmp_path / "b.yaml", vllm={"max_model_len": 2048})
    first = up(cluster, a)
    assert first.returncode == 0, first.stderr + first.stdout
    cluster.exec(2, ["mv", f"{NODE_HF_CACHE}/hub", f"{NODE_HF_CACHE}/hub.off"])
    try:
        skip = [arg for name in ("model-files", "model-shards", "model-incomplete", "speculative-tokens")
                for arg in ("--skip-check", name)]
        second = up(cluster, b, *skip)
        assert second.returncode == 1, second.stderr + second.stdout
        assert "RESTORE FAILED" in second.stderr and "NOTHING MAY BE SERVING" in second.stderr, second.stderr
        assert second.stderr.count("not in this node's HF cache") >= 2, "both causes must be named"
        records = {r["id"]: r for r in history(cluster)}
        assert records[2]["outcome"] == "failed" and records[2]["restored"] is None and records[2]["restore_failed"]
        assert not any(r["serving"] for r in records.values())
    finally:
        cluster.exec(2, ["mv", f"{NODE_HF_CACHE}/hub.off", f"{NODE_HF_CACHE}/hub"])


def test_rollback_after_a_reboot_serves_under_the_plans_names(fresh, tmp_path):
    """Both nodes rebooted: the release's containers (no restart policy) are exited under their names.
    `rollback 1` starts those same containers again under those same names, which carry the plan (found by
    the maintenance work: an older StopPrevious renamed them, and they served as sd-...-rN-RUN)."""
    cluster = fresh
    a = recipe_variant(cluster, tmp_path / "a.yaml")
    result = up(cluster, a)
    assert result.returncode == 0, result.stderr + result.stdout
    names = {n: set(running(cluster, n)) for n in (1, 2)}
    ids = {n: {d["Id"] for d in running(cluster, n).values()} for n in (1, 2)}
    for node in ("spark-2", "spark-1"):
        cluster.reboot(node)
    assert not plan_hashes(cluster), "nothing comes back by itself: no restart policy, no boot unit"
    back = spark_deploy("rollback", "1", "-i", cluster.inventory_path, timeout=600)
    assert back.returncode == 0, back.stderr + back.stdout
    assert "started again, not re-created" in back.stdout
    assert {n: set(running(cluster, n)) for n in (1, 2)} == names, "served under the plan's container names"
    assert {n: {d["Id"] for d in running(cluster, n).values()} for n in (1, 2)} == ids
    assert completion(cluster)
    records = {r["id"]: r for r in history(cluster)}
    assert records[2]["rollback_of"] == 1 and records[2]["serving"] is True


def test_prune_with_a_node_unreachable_names_it_and_leaves_the_serving_and_kept_releases(fresh, tmp_path):
    """Issue 19 acceptance 1 (prune): spark-2's SSH is down; prune exits 1 naming it, touches neither the
    serving release nor the kept one anywhere, and lets the lock go."""
    cluster = fresh
    a = recipe_variant(cluster, tmp_path / "a.yaml")
    b = recipe_variant(cluster, tmp_path / "b.yaml", vllm={"max_model_len": 2048})
    up_in_turn(cluster, a, b)

    def kept(node: int) -> list[str]:  # release 1's stopped containers
        return sorted(node_docker(cluster, node, "ps", "-a", "--filter", "status=exited", "--filter",
                                  "label=spark-deploy.managed=true", "--format", "{{.Names}}", check=True).stdout.split())

    kept_before = {n: kept(n) for n in (1, 2)}
    assert all(kept_before.values()), kept_before
    serving_before = started_at(cluster)
    cluster.fault(2, "stop-sshd")
    try:
        pruned = spark_deploy("prune", "--keep", "2", "-i", cluster.inventory_path)
    finally:
        cluster.fault(2, "start-sshd")
    assert pruned.returncode == 1, pruned.stdout + pruned.stderr
    assert "prune incomplete: spark-2: unreachable" in pruned.stderr, pruned.stderr
    assert started_at(cluster) == serving_before, "the serving release must not be touched"
    assert {n: kept(n) for n in (1, 2)} == kept_before, "the kept release must not be touched"
    lock = spark_deploy("lock", "-i", cluster.inventory_path, "--json")
    assert lock.returncode == 0 and cli_json.result(lock.stdout)["held"] is False, lock.stdout
    # the operation's one audit entry says what happened where (issue 19: per-node reasons kept)
    log = spark_deploy("audit", "-i", cluster.inventory_path, "--json")
    assert log.returncode == 0, log.stderr
    line = [entry for entry in cli_json.result(log.stdout) if entry["action"] == "prune"][-1]
    assert line["outcome"] == "incomplete" and line["nodes"]["spark-2"].startswith("unreachable"), line
    assert completion(cluster)
