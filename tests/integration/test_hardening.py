"""Issue 8, items 3, 6, 7, 10, 11 and 12, on the simulated cluster through the real command line.

- 3: no `docker logs` of ours is left running on any node after `up` ends, ok or failed;
- 6: a second Ctrl-C during the undo: exit 1, and the message says exactly what `docker ps -a` shows is left;
- 7: the secrets env-file is gone from every node while the ready wait runs; a killed `up` leaves it, `down` removes it;
- 10: a hung load shows "waiting" heartbeats (elapsed, last line, its age) and one stall warning;
- 11: `status` exits 1 on a dead rank, and on a live deployment that cannot generate (`--no-probe` skips that);
- 12: `down` with the peer unreachable still removes the head, exits 1 naming the peer.
"""

from __future__ import annotations

import json
import re
import secrets as pysecrets
import signal
import time
import urllib.request

import pytest

from orchestrator.config.load import load_inventory

from background import up_json
from deploy_helpers import assert_nothing_left, node_docker, plan_names, recipe_variant, spark_deploy
import cli_json

pytestmark = pytest.mark.integration

NODES = ("spark-1", "spark-2")


def named(cluster, recipe=None) -> dict[str, list[str]]:
    """Per node, the one container `up` of the recipe's plan runs there (its name carries the plan)."""
    return {node: [name] for node, name in zip(NODES, plan_names(cluster, recipe).values())}


UpRun = up_json  # `up --json` in the background (background.py)


def phase_start(name: str):
    return lambda e: e["event"] == "phase-start" and e.get("phase") == name


@pytest.fixture
def runs():
    """Every background `up` a test starts is killed at the end, whatever happened."""
    started: list[UpRun] = []

    def start(*args, **kw) -> UpRun:
        run = UpRun(*args, **kw)
        started.append(run)
        return run

    yield start
    for run in started:
        run.kill()


def docker_logs_processes(cluster) -> dict[str, list[str]]:
    """Per node: every process whose command line runs `docker logs` (only spark-deploy runs it there)."""
    found = {}
    for node in NODES:
        ps = cluster.exec(node, ["ps", "-eo", "pid,args"]).stdout.splitlines()
        found[node] = [line.strip() for line in ps if re.search(r"\bdocker logs\b", line)]
    return found


def containers_with_ids(cluster) -> set[tuple[str, str, str]]:
    """(node, name, short ID) of every spark-deploy container, running or not."""
    found = set()
    for node in NODES:
        out = node_docker(cluster, node, "ps", "--all", "--filter", "label=spark-deploy.managed=true",
                          "--format", "{{.Names}} {{.ID}}", check=True).stdout
        for line in out.splitlines():
            name, short = line.split()
            found.add((node, name, short[:12]))
    return found


def running_ranks(cluster) -> dict[str, list[str]]:
    return {node: node_docker(cluster, node, "ps", "--filter", "label=spark-deploy.managed=true",
                              "--format", "{{.Names}}", check=True).stdout.split() for node in NODES}


def env_files(cluster, marker: str) -> dict[str, list[str]]:
    """Per node: the files under its state dir that hold `marker` (the secret's value)."""
    inventory, _ = load_inventory(cluster.inventory_path)
    found = {}
    for node in NODES:
        state_dir = inventory.node(node).state_dir
        out = cluster.exec(node, ["sh", "-c", 'grep -rlF -- "$1" "$2" 2>/dev/null; true', "sh", marker, state_dir])
        found[node] = out.stdout.split()
    return found


# ---- 3 ------------------------------------------------------------------------------------------------


def test_no_docker_logs_of_ours_outlives_up_ok_or_failed(clean, tmp_path):
    cluster = clean
    assert docker_logs_processes(cluster) == {n: [] for n in NODES}, "a leftover from an earlier test"

    ok = spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path)
    assert ok.returncode == 0, ok.stderr + ok.stdout
    assert docker_logs_processes(cluster) == {n: [] for n in NODES}, "a successful up left its log watchers running"
    assert spark_deploy("down", "-i", cluster.inventory_path).returncode == 0

    # A failed up that keeps its containers (log checks fail, --keep-on-failure): the log streams would never
    # end by themselves, since the containers they follow still run.
    bad = recipe_variant(cluster, tmp_path / "auto.yaml", vllm={"moe_backend": "auto"})
    failed = spark_deploy("up", bad, "-i", cluster.inventory_path, "--keep-on-failure")
    assert failed.returncode == 1 and "moe-backend" in failed.stderr, failed.stderr + failed.stdout
    assert running_ranks(cluster) == named(cluster, bad)
    assert docker_logs_processes(cluster) == {n: [] for n in NODES}, "a failed up left its log watchers running"


# ---- 6 ------------------------------------------------------------------------------------------------

LEFT = re.compile(r"^\s*(spark-\d+): container (\S+) \(([0-9a-f]{12})\) of this run: docker rm -f ([0-9a-f]{12})\s*$")


@pytest.mark.parametrize("second", ["at-undo-start", 0.05, 0.1, "at-first-removal", "at-undo-end"])
def test_second_ctrl_c_during_undo_says_exactly_what_is_left(clean, tmp_path, runs, second):
    cluster = clean
    recipe = recipe_variant(cluster, tmp_path / "slow.yaml", env={"SIM_LOAD_SECONDS": "60"})
    run = runs(recipe, cluster.inventory_path)
    run.wait_for(phase_start("ready"))
    assert len(containers_with_ids(cluster)) == 2, "both ranks should be running by now"

    run.proc.send_signal(signal.SIGINT)
    if second == "at-undo-start":
        run.wait_for(phase_start("undo"), timeout=30)
    elif second == "at-undo-end":
        run.wait_for(lambda e: e["event"] == "phase-end" and e.get("phase") == "undo", timeout=30)
    elif second == "at-first-removal":
        run.wait_for(lambda e: e["event"] == "container-removed", timeout=30)
    else:
        time.sleep(second)  # the point of the test: the second Ctrl-C comes this soon after the first
    run.proc.send_signal(signal.SIGINT)
    code = run.finish()
    stderr = run.stderr()

    assert code == 130, f"exit {code}\n{stderr}"
    assert "Traceback" not in stderr, stderr
    present = containers_with_ids(cluster)
    listed = set()
    for line in stderr.splitlines():
        found = LEFT.match(line)
        if found:
            node, name, short, in_command = found.groups()
            assert short == in_command, line
            listed.add((node, name, short))
    if "left as it is:" in stderr:
        assert listed, f"says something is left but lists nothing:\n{stderr}"
    else:
        assert not listed, stderr
    assert listed == present, (f"the message lists {sorted(listed)} but the nodes hold {sorted(present)}:\n{stderr}")
    for node, _name, short in listed:  # the command given removes it
        assert node_docker(cluster, node, "rm", "-f", short).code == 0
    assert_nothing_left(cluster)


# ---- 7 ------------------------------------------------------------------------------------------------


def test_secrets_env_file_is_gone_during_the_ready_wait_and_down_removes_a_stale_one(clean, tmp_path, runs):
    cluster = clean
    marker = "sdtest_" + pysecrets.token_hex(12)
    recipe = recipe_variant(cluster, tmp_path / "secret.yaml", env={"SIM_LOAD_SECONDS": "60"},
                            secrets=["SD_TEST_TOKEN"])
    env = {"SD_TEST_TOKEN": marker}

    # A normal up: by the ready wait, Docker has read the env-file and no node keeps it.
    run = runs(recipe, cluster.inventory_path, env=env)
    run.wait_for(phase_start("ready"))
    for node, name in zip(NODES, plan_names(cluster, recipe).values()):
        env_now = node_docker(cluster, node, "inspect", "--format", "{{json .Config.Env}}", name, check=True).stdout
        assert f"SD_TEST_TOKEN={marker}" in json.loads(env_now), f"{node}: the container did not get the secret"
    assert env_files(cluster, marker) == {n: [] for n in NODES}, "the env-file outlives the last docker run"
    run.kill()  # SIGKILL during the ready wait: nothing secret is left, since the file is already gone
    assert env_files(cluster, marker) == {n: [] for n in NODES}
    assert spark_deploy("down", "-i", cluster.inventory_path).returncode == 0

    # Killed before the peers start: the env-file is still needed then, and a SIGKILL leaves it on disk.
    killed = runs(recipe, cluster.inventory_path, env=env)
    killed.wait_for(phase_start("peers"))
    killed.kill()
    stale = env_files(cluster, marker)
    assert all(stale[n] for n in NODES), f"expected the killed up to leave the env-file on every node: {stale}"
    assert marker not in killed.stderr() + "".join(json.dumps(e) for e in killed.events)

    down = spark_deploy("down", "-i", cluster.inventory_path)
    assert down.returncode == 0, down.stdout + down.stderr
    assert env_files(cluster, marker) == {n: [] for n in NODES}, "down left the stale secrets env-file"
    assert marker not in down.stdout + down.stderr


# ---- 10 -----------------------------------------------------------------------------------------------


def test_a_stalled_load_shows_heartbeats_and_warns_once(clean, tmp_path, runs):
    cluster = clean
    recipe = recipe_variant(cluster, tmp_path / "hang.yaml", env={"SIM_LOAD_SECONDS": "60", "SIM_FAULT_HANG_LOAD": "1"})
    stall = 4.0
    run = runs(recipe, cluster.inventory_path, "--heartbeat", "1", "--stall-warning", str(stall))
    run.wait_for(phase_start("ready"))
    warning = run.wait_for(lambda e: e["event"] == "warning", timeout=60)
    logged = "".join(r.stdout + r.stderr for r in (node_docker(cluster, n, "logs", name)
                                                   for n, name in zip(NODES, plan_names(cluster, recipe).values())))
    run.wait_for(lambda e: e["event"] == "waiting" and e.get("phase") == "ready", timeout=30)  # still alive after
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130

    waiting = [e for e in run.events if e["event"] == "waiting" and e.get("phase") == "ready"]
    assert len(waiting) >= 3, f"too few heartbeats: {waiting}"
    elapsed = [e["elapsed"] for e in waiting]
    assert elapsed == sorted(elapsed) and elapsed[-1] > elapsed[0]
    for e in waiting:
        assert e["last_line"] and e["last_line"] in logged, f"not a line the ranks logged: {e}"
        assert e["node"] in NODES and e["last_line_age"] is not None and e["node"] in e["message"]
        assert f"{e['elapsed']:.0f} s" in e["message"] and e["last_line"][:40] in e["message"]
    ages = [e["last_line_age"] for e in waiting]
    assert ages == sorted(ages) and ages[-1] >= stall, f"the age of the last line must grow during a stall: {ages}"
    assert warning.get("phase") == "ready" and "no node has logged anything for" in warning["message"]
    said = float(re.search(r"for (\d+) s", warning["message"]).group(1))
    assert said >= stall
    assert [e for e in run.events if e["event"] == "warning" and "no node has logged" in e["message"]] == [warning], \
        "the stall is warned about once"


# ---- 11 -----------------------------------------------------------------------------------------------


def test_status_fails_on_a_dead_rank_and_on_an_endpoint_that_cannot_generate(clean, tmp_path, runs):
    cluster = clean
    assert spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path).returncode == 0
    healthy = spark_deploy("status", "-i", cluster.inventory_path)
    assert healthy.returncode == 0 and "generates" in healthy.stdout, healthy.stdout + healthy.stderr

    node_docker(cluster, 2, "kill", plan_names(cluster)[2], check=True)
    dead = spark_deploy("status", "-i", cluster.inventory_path, "--json")
    assert dead.returncode == 1, dead.stdout + dead.stderr
    report = cli_json.result(dead.stdout)
    problems = [p for d in report["deployments"] for p in d["problems"]]
    assert any("rank 1" in p and "spark-2" in p and "exited" in p for p in problems), problems
    text = spark_deploy("status", "-i", cluster.inventory_path, "--no-probe")
    assert text.returncode == 1 and "rank 1 on spark-2" in text.stdout, text.stdout + text.stderr
    assert "not probed" in text.stdout
    assert spark_deploy("down", "-i", cluster.inventory_path).returncode == 0

    # Every rank alive, /health 200, but no completion ever finishes. `up` cannot get through readiness like
    # that (its own completion hangs), so it is stopped during the wait with --keep-on-failure, once the head
    # answers /health: what is left is exactly the half-dead deployment.
    recipe = recipe_variant(cluster, tmp_path / "stuck.yaml", env={"SIM_FAULT_COMPLETIONS_HANG": "1"})
    run = runs(recipe, cluster.inventory_path, "--keep-on-failure")
    run.wait_for(phase_start("ready"))
    url = f"http://{cluster.nodes()[0].ip}:8000/health"
    deadline = time.monotonic() + 120
    while not _answers_200(url):
        assert time.monotonic() < deadline and run.proc.poll() is None, "the head never answered /health"
        time.sleep(0.2)
    run.proc.send_signal(signal.SIGINT)
    assert run.finish() == 130
    assert running_ranks(cluster) == named(cluster, recipe)

    short = ("--probe-timeout", "3")  # the completion that never finishes: bounded by the option, not 15 s
    stuck = spark_deploy("status", "-i", cluster.inventory_path, "--json", *short)
    assert stuck.returncode == 1, stuck.stdout + stuck.stderr
    report = cli_json.result(stuck.stdout)
    assert all(d["ok"] for d in report["deployments"]), "every rank runs: that is not the problem here"
    (endpoint,) = report["endpoints"]
    assert endpoint["healthy"] is True and endpoint["generates"] is False and endpoint["probe"], endpoint
    said = spark_deploy("status", "-i", cluster.inventory_path, *short)
    assert said.returncode == 1 and "does not generate" in said.stdout, said.stdout + said.stderr

    skipped = spark_deploy("status", "-i", cluster.inventory_path, "--json", "--no-probe")
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert cli_json.result(skipped.stdout)["endpoints"][0]["generates"] is None


def _answers_200(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


# ---- 12 -----------------------------------------------------------------------------------------------


def test_down_with_the_peer_unreachable_removes_the_head_and_names_the_peer(clean):
    cluster = clean
    assert spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path).returncode == 0
    try:
        cluster.fault(2, "stop-sshd")
        down = spark_deploy("down", "-i", cluster.inventory_path)
        assert down.returncode == 1, down.stdout + down.stderr
        assert "spark-2" in down.stderr and "unreachable" in down.stderr, down.stderr
        assert "spark-1" not in down.stderr, f"only the peer failed:\n{down.stderr}"
        names = plan_names(cluster)
        assert f"spark-1: removed {names[1]}" in down.stdout, down.stdout
        left = containers_with_ids(cluster)
        assert {(n, name) for n, name, _ in left} == {("spark-2", names[2])}, left
    finally:
        cluster.fault(2, "start-sshd")
    again = spark_deploy("down", "-i", cluster.inventory_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert f"spark-2: removed {plan_names(cluster)[2]}" in again.stdout
    assert_nothing_left(cluster)
