"""Issue 9, acceptance items 3, 4 and 6, on the simulated cluster through the real command line.

- 3a: two `up`s 0.5 s apart: the second refuses at once naming the first's owner (pid); the first serves;
- 3b: an `up` SIGKILLed in its ready wait: the next `up` takes the stale lock over, removes the dead run's
  containers, serves, audits the takeover, and records the killed release as abandoned;
- 4: with the controller's cache and node 2's records deleted, `history` lists every release from node 1
  and names node 2; the next `up` puts node 2's copy back;
- 6: a secret's value (a unique marker) appears in no node's state dir and in no output of any command.
"""

from __future__ import annotations

import json
import secrets as pysecrets
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from orchestrator.config.load import load_inventory

from deploy_helpers import completion, node_docker, plan_names, recipe_variant, spark_deploy
import cli_json

pytestmark = pytest.mark.integration

NODES = ("spark-1", "spark-2")
RUN_LABEL = "spark-deploy.run"


def phase_start(name: str):
    return lambda e: e.get("event") == "phase-start" and e.get("phase") == name


def up(cluster, recipe, *extra, env=None):
    return spark_deploy("up", recipe, "-i", cluster.inventory_path, *extra, env=env, timeout=600)


def history(cluster, env=None) -> tuple[list[dict], subprocess.CompletedProcess]:
    result = spark_deploy("history", "-i", cluster.inventory_path, "--json", env=env)
    assert result.returncode == 0, result.stderr + result.stdout
    return cli_json.result(result.stdout), result


def state_dir(cluster, node: str) -> str:
    inventory, _ = load_inventory(cluster.inventory_path)
    return inventory.node(node).state_dir


def releases_dir(cluster, node: str) -> str:
    inventory, _ = load_inventory(cluster.inventory_path)
    return f"{inventory.node(node).state_dir}/releases/{inventory.cluster}"


def record_files(cluster, node: str) -> set[str]:
    result = cluster.exec(node, ["ls", "-1", releases_dir(cluster, node)], check=False)
    return {name for name in result.stdout.split() if name.endswith(".json")} if result.code == 0 else set()


def run_labels(cluster) -> dict[str, set[str]]:
    """Per node: the run labels of every spark-deploy container on it, running or not."""
    found = {}
    for node in NODES:
        out = node_docker(cluster, node, "ps", "--all", "--filter", "label=spark-deploy.managed=true",
                          "--format", '{{.Label "spark-deploy.run"}}', check=True).stdout
        found[node] = {line for line in out.splitlines() if line}
    return found


def with_run(cluster, run_id: str) -> dict[str, list[str]]:
    found = {}
    for node in NODES:
        out = node_docker(cluster, node, "ps", "--all", "--filter", f"label={RUN_LABEL}={run_id}",
                          "--format", "{{.Names}} {{.Status}}", check=True).stdout
        found[node] = [line for line in out.splitlines() if line]
    return found


def running_plan_hashes(cluster) -> set[str]:
    hashes = set()
    for node in NODES:
        out = node_docker(cluster, node, "ps", "--filter", "label=spark-deploy.managed=true",
                          "--format", '{{.Label "spark-deploy.plan-hash"}}', check=True).stdout
        hashes |= {line for line in out.splitlines() if line}
    return hashes


# ---- 3a -----------------------------------------------------------------------------------------------


def test_a_second_up_refuses_at_once_naming_the_first_and_the_first_serves(clean, tmp_path, background):
    cluster = clean
    slow = recipe_variant(cluster, tmp_path / "slow.yaml", env={"SIM_LOAD_SECONDS": "15"})

    first = background("up", slow, "-i", cluster.inventory_path, "--json", events=True)
    first.wait_for(phase_start("preflight"))  # the event, not a guess: the first holds the lock from here on
    second = background("up", cluster.recipe_path, "-i", cluster.inventory_path)
    code = second.finish(timeout=120)

    assert first.proc.poll() is None, (f"the first up ended (exit {first.proc.returncode}) before the second; "
                                       f"it should still be loading:\n{first.stderr()}")
    assert code == 1, f"exit {code}\n{second.stdout()}\n{second.stderr()}"
    assert "holds the deploy lock" in second.stderr(), second.stderr()
    assert f"pid {first.proc.pid}" in second.stderr(), f"the first's pid {first.proc.pid} is not named:\n{second.stderr()}"
    assert "Traceback" not in second.stderr(), second.stderr()

    first_code = first.finish(timeout=300)
    assert first_code == 0, f"exit {first_code}\n{first.stdout()}\n{first.stderr()}"
    assert completion(cluster)
    lock = spark_deploy("lock", "status", "-i", cluster.inventory_path, "--json")
    assert lock.returncode == 0, lock.stderr
    assert cli_json.result(lock.stdout)["held"] is False, "the first up left its lock behind"


# ---- 3b -----------------------------------------------------------------------------------------------


def test_a_killed_up_leaves_a_stale_lock_the_next_up_takes_over_and_cleans(clean, tmp_path, background):
    cluster = clean
    slow = recipe_variant(cluster, tmp_path / "slow.yaml", env={"SIM_LOAD_SECONDS": "15"})

    killed = background("up", slow, "-i", cluster.inventory_path, "--json", events=True)
    killed.wait_for(phase_start("ready"))
    labels = run_labels(cluster)
    assert all(labels[n] for n in NODES), f"both ranks should have a container by the ready wait: {labels}"
    dead_runs = labels["spark-1"] | labels["spark-2"]
    assert len(dead_runs) == 1, f"one run expected on the nodes: {labels}"
    dead_run = dead_runs.pop()
    killed.kill()
    assert killed.proc.returncode == -9
    assert all(with_run(cluster, dead_run)[n] for n in NODES), "SIGKILL should leave the killed run's containers"

    nxt = up(cluster, cluster.recipe_path)
    output = nxt.stdout + nxt.stderr
    assert nxt.returncode == 0, output
    assert "took over a stale deploy lock" in output, output
    assert f"{killed.proc.pid}" in output, f"the dead owner's pid {killed.proc.pid} is not named:\n{output}"

    assert with_run(cluster, dead_run) == {n: [] for n in NODES}, "the killed run's containers are still there"
    assert dead_run not in set().union(*run_labels(cluster).values())
    assert completion(cluster)

    audit = spark_deploy("audit", "-i", cluster.inventory_path, "--json")
    assert audit.returncode == 0, audit.stderr
    takeovers = [line for line in cli_json.result(audit.stdout) if line.get("action") == "lock-takeover"]
    assert takeovers, f"no lock-takeover line in the audit log:\n{audit.stdout}"
    assert str(killed.proc.pid) in takeovers[-1].get("detail", ""), takeovers[-1]

    records, _ = history(cluster)
    dead = [r for r in records if r["run_id"] == dead_run]
    assert len(dead) == 1, f"one release for the killed run {dead_run}: {records}"
    assert dead[0]["outcome"] == "abandoned", dead[0]
    assert not dead[0]["serving"]
    assert records[0]["serving"] is True and records[0]["outcome"] == "serving", records[0]


# ---- 4 ------------------------------------------------------------------------------------------------


def test_history_survives_losing_the_controller_cache_and_one_node(clean, tmp_path):
    cluster = clean
    a = recipe_variant(cluster, tmp_path / "a.yaml", vllm={"max_model_len": 2048})
    b = recipe_variant(cluster, tmp_path / "b.yaml")
    first = up(cluster, a)
    assert first.returncode == 0, first.stderr + first.stdout
    second = up(cluster, b)
    assert second.returncode == 0, second.stderr + second.stdout
    before, _ = history(cluster)
    ids = [r["id"] for r in before]
    assert len(ids) >= 2 and ids[:2] == [ids[0], ids[0] - 1], ids
    ours = set(ids[:2])

    # this cluster's part of the controller's cache only: other workers' clusters use theirs meanwhile
    own = load_inventory(cluster.inventory_path)[0].cluster
    shutil.rmtree(Path(tempfile.gettempdir()) / "spark-deploy-releases" / own, ignore_errors=True)
    state2 = state_dir(cluster, "spark-2")
    cluster.exec("spark-2", ["rm", "-rf", f"{state2}/releases"])
    assert record_files(cluster, "spark-2") == set()
    assert record_files(cluster, "spark-1"), "node 1 should still hold the records"

    after, listed = history(cluster)
    assert [r["id"] for r in after] == ids, f"history lost releases: {ids} -> {[r['id'] for r in after]}"
    assert {r["id"]: r["plan_hash"] for r in after} == {r["id"]: r["plan_hash"] for r in before}
    assert "spark-2" in listed.stderr, listed.stderr
    assert "no release records" in listed.stderr or "disagrees" in listed.stderr, listed.stderr
    assert "spark-1" not in listed.stderr, f"node 1's copy is whole, yet named:\n{listed.stderr}"

    third = up(cluster, a)  # a changed plan: a new release, which takes the lock and repairs node 2's copy
    assert third.returncode == 0, third.stderr + third.stdout
    repaired = record_files(cluster, "spark-2")
    expected = {f"{rid:06d}.json" for rid in [*ours, max(ours) + 1]}
    assert expected <= repaired, f"node 2 holds {sorted(repaired)}, expected at least {sorted(expected)}"
    assert record_files(cluster, "spark-1") == repaired
    _, whole = history(cluster)
    assert "disagrees" not in whole.stderr, whole.stderr


# ---- 6 ------------------------------------------------------------------------------------------------


def test_no_secret_value_in_any_record_audit_line_or_output(clean, tmp_path):
    cluster = clean
    marker = "hf_sdmarker" + pysecrets.token_hex(12)
    env = {"HF_TOKEN": marker}
    a = recipe_variant(cluster, tmp_path / "a.yaml", secrets=["HF_TOKEN"])
    b = recipe_variant(cluster, tmp_path / "b.yaml", vllm={"max_model_len": 2048}, secrets=["HF_TOKEN"])
    bad = recipe_variant(cluster, tmp_path / "bad.yaml", vllm={"max_model_len": 2048}, extra={"no-such-flag": True},
                         secrets=["HF_TOKEN"])
    inv = cluster.inventory_path
    outputs: list[tuple[str, subprocess.CompletedProcess]] = []

    def run(*args: str, code: int | None = 0) -> subprocess.CompletedProcess:
        result = spark_deploy(*args, env=env, timeout=600)
        outputs.append((" ".join(map(str, args)), result))
        if code is not None:
            assert result.returncode == code, f"{args}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
        return result

    run("up", a, "-i", inv)
    for node, name in zip(NODES, plan_names(cluster, a).values()):  # the marker is really in play
        env_now = node_docker(cluster, node, "inspect", "--format", "{{json .Config.Env}}", name, check=True).stdout
        assert f"HF_TOKEN={marker}" in json.loads(env_now), f"{node}: the container did not get the secret"
    run("up", b, "-i", inv, "--json")
    run("history", "-i", inv)
    run("history", "-i", inv, "--json")
    run("audit", "-i", inv)
    run("audit", "-i", inv, "--json")
    run("status", "-i", inv)
    run("status", "-i", inv, "--json")
    run("lock", "status", "-i", inv)
    run("lock", "status", "-i", inv, "--json")
    failed = run("up", bad, "-i", inv, "--skip-check", "vllm-flags", code=1)  # fails on the node, restores
    assert "no-such-flag" in failed.stderr, failed.stderr
    run("history", "-i", inv, "--json")
    run("audit", "-i", inv, "--json")

    for node in NODES:
        where = state_dir(cluster, node)
        found = cluster.exec(node, ["grep", "-r", "-l", marker, where], check=False)
        assert found.code == 1 and not found.stdout, f"{node}: the secret's value is in {found.stdout or found.stderr}"
        names = cluster.exec(node, ["grep", "-r", "-l", "HF_TOKEN", releases_dir(cluster, node)], check=False)
        assert names.code == 0 and names.stdout, f"{node}: no record names the secret HF_TOKEN (by name)"
    cache = Path(tempfile.gettempdir()) / "spark-deploy-releases"
    if cache.exists():
        leaked = [str(p) for p in cache.rglob("*") if p.is_file() and marker in p.read_text(errors="replace")]
        assert not leaked, f"the controller's cache holds the secret's value: {leaked}"
    for command, result in outputs:
        assert marker not in result.stdout + result.stderr, f"`{command}` printed the secret's value"
