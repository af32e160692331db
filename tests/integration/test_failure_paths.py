"""Issue 19, acceptance 1: every mutating command fails midway and nothing is lost (on the simulated cluster,
through the real command line; `prune` with a node unreachable is in test_releases.py).

- `rollback` whose target dies as it starts: exit 1 naming node and cause; the release before serves again.
- `maintenance begin --stop` failing on the peer: exit 1, and either still fully serving (the peer unreachable
  from the start: nothing stopped, no window opened) or fully stopped and recorded (the peer's SSH dies while
  its `docker stop` runs: the head is stopped too), and then `maintenance end` brings it back.
- `boot enable` failing on the second node: what it turned off on the first comes back on again, and no unit
  of ours is left enabled anywhere.
- `bench --compare A B` whose B dies at start: exit 1 naming B; A serves again.
- SIGINT during `down` and during `rollback`: `status` describes what the nodes hold, and the next command
  (a second `down`; a second `rollback`) ends in a clean state.

Containers are identified by their labels (plan hash, rank), never by name.
"""

from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import threading
import time

import pytest

from deploy_helpers import OLD_STACK, SUDOERS, CLI, forget_releases, completion, node_docker, recipe_variant, spark_deploy

from orchestrator.sim.state import NODE_STATE_DIR
import cli_json

pytestmark = pytest.mark.integration

NODES = ("spark-1", "spark-2")


@pytest.fixture
def fresh(pair):
    """`pair` with no release history, audit or lock on the nodes: release numbers start at 1."""
    forget_releases(pair)
    return pair


def up(cluster, recipe, *extra):
    result = spark_deploy("up", recipe, "-i", cluster.inventory_path, *extra, timeout=600)
    assert result.returncode == 0, result.stderr + result.stdout
    return result


def history(cluster) -> dict[int, dict]:
    result = spark_deploy("history", "-i", cluster.inventory_path, "--json")
    assert result.returncode == 0, result.stderr + result.stdout
    return {r["id"]: r for r in cli_json.result(result.stdout)}


def containers(cluster) -> dict[tuple[str, str], dict]:
    """(node, container ID) -> {state, plan, rank} of every spark-deploy container, running or not."""
    found = {}
    for node in NODES:
        out = node_docker(cluster, node, "ps", "--all", "--no-trunc", "--filter", "label=spark-deploy.managed=true",
                          "--format", '{{.ID}} {{.State}} {{.Label "spark-deploy.plan-hash"}} '
                                      '{{.Label "spark-deploy.rank"}}', check=True).stdout
        for line in out.splitlines():
            cid, state, plan, rank = line.split()
            found[(node, cid)] = {"state": state, "plan": plan, "rank": int(rank)}
    return found


def running_plans(cluster) -> dict[str, set[str]]:
    """Per node, the plan hashes of our running containers."""
    out: dict[str, set[str]] = {n: set() for n in NODES}
    for (node, _cid), c in containers(cluster).items():
        if c["state"] == "running":
            out[node].add(c["plan"])
    return out


def status(cluster, *args: str) -> tuple[int, dict]:
    result = spark_deploy("status", "-i", cluster.inventory_path, "--json", *args)
    return result.returncode, cli_json.result(result.stdout)


def assert_serves(cluster, plan: str, release: int) -> None:
    """Every rank of `plan` runs (and nothing else of ours does), status says release `release` serves, and
    the head completes a prompt."""
    assert running_plans(cluster) == {n: {plan} for n in NODES}
    code, report = status(cluster)
    assert code == 0, report
    assert [(d["release"], d["ok"]) for d in report["deployments"]] == [(release, True)], report
    assert completion(cluster)


def assert_status_truthful(cluster) -> dict:
    """`status --json` lists every running container the nodes hold (node, plan, rank), and nothing the nodes
    do not hold in the state it says; a deployment it calls ok has a running rank on every node."""
    _code, report = status(cluster, "--no-probe")
    held = containers(cluster).values()
    held_by_node = {(node, c["plan"], c["rank"], c["state"]) for (node, _cid), c in containers(cluster).items()}
    said = {(r["node"], r["plan_hash"], r["rank"], r["state"].split()[0]) for r in report["containers"]}
    assert said <= held_by_node, (report, held_by_node)
    assert {s for s in said if s[3] == "running"} == {h for h in held_by_node if h[3] == "running"}, \
        (report, held_by_node)
    for d in report["deployments"]:
        if d["ok"]:
            (plan,) = d["plan_hashes"]
            assert all(plan in p for p in running_plans(cluster).values()), (d, list(held))
    return report


def kill_rank(cluster, node: str, plan: str, bound: float = 60) -> None:
    """SIGKILL the running container of `plan` on `node` as soon as there is one (bounded)."""
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        ids = node_docker(cluster, node, "ps", "-q", "--filter", f"label=spark-deploy.plan-hash={plan}",
                          "--filter", "status=running", check=True).stdout.split()
        if ids:
            node_docker(cluster, node, "kill", *ids, check=True)
            return
        time.sleep(0.1)
    raise AssertionError(f"{node}: no running container of plan {plan} within {bound:.0f} s")


def phase_start(name: str):
    return lambda e: e.get("event") == "phase-start" and e.get("phase") == name


def slow_release_then_another(cluster, tmp_path) -> tuple[str, str]:
    """Release 1 (loads for 8 s: its ranks are still starting when a test acts on a rollback to it), then
    release 2 serving another plan. Returns both plans."""
    up(cluster, recipe_variant(cluster, tmp_path / "a.yaml", env={"SIM_LOAD_SECONDS": "8"}))
    up(cluster, recipe_variant(cluster, tmp_path / "b.yaml", vllm={"max_model_len": 2048}))
    records = history(cluster)
    plan_a, plan_b = records[1]["plan_hash"], records[2]["plan_hash"]
    assert records[2]["serving"] and plan_a != plan_b
    return plan_a, plan_b


# ---- rollback whose target dies as it starts ----------------------------------------------------------


def test_rollback_whose_target_dies_as_it_starts_serves_the_release_before(fresh, tmp_path, background):
    cluster = fresh
    plan_a, plan_b = slow_release_then_another(cluster, tmp_path)

    run = background("rollback", "1", "-i", cluster.inventory_path, "--json", events=True)
    run.wait_for(phase_start("rendezvous"))
    kill_rank(cluster, "spark-2", plan_a)  # the target's peer dies as it starts (exit 137, as an OOM kill)
    code = run.finish()
    said = run.stderr() + run.stdout()
    assert code == 1, said
    assert "spark-2" in run.stderr() and "137" in run.stderr(), said
    assert "release 2 serves again" in run.stderr(), said
    assert_serves(cluster, plan_b, 2)
    after = history(cluster)
    assert after[3]["rollback_of"] == 1 and after[3]["outcome"] == "failed" and after[3]["restored"] == 2, after[3]


# ---- SIGINT during rollback ---------------------------------------------------------------------------


def test_sigint_during_rollback_leaves_the_release_before_serving_and_a_second_rollback_works(fresh, tmp_path,
                                                                                               background):
    cluster = fresh
    plan_a, plan_b = slow_release_then_another(cluster, tmp_path)

    run = background("rollback", "1", "-i", cluster.inventory_path, "--json", events=True)
    run.wait_for(phase_start("ready"))  # the target's ranks run and load: the old release is stopped
    run.proc.send_signal(signal.SIGINT)
    code = run.finish()
    assert code == 130, run.stderr()
    assert "Traceback" not in run.stderr(), run.stderr()
    report = assert_status_truthful(cluster)
    assert [d["release"] for d in report["deployments"]] == [2], report
    assert_serves(cluster, plan_b, 2)

    again = spark_deploy("rollback", "1", "-i", cluster.inventory_path, timeout=600)
    assert again.returncode == 0, again.stderr + again.stdout
    assert running_plans(cluster) == {n: {plan_a} for n in NODES}
    assert_status_truthful(cluster)
    assert completion(cluster)


# ---- SIGINT during down -------------------------------------------------------------------------------


class Lines:
    """A command's stdout read line by line on a thread, waited on with a bound."""

    def __init__(self, *args: str):
        self.proc = subprocess.Popen([*CLI, *map(str, args)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                     text=True, env={**os.environ, "COLUMNS": "200"})
        self.lines: list[str] = []
        self._queue: queue.Queue = queue.Queue()
        threading.Thread(target=self._read, daemon=True).start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)
            self._queue.put(line)
        self._queue.put(None)

    def wait_for(self, text: str, timeout: float = 120) -> str:
        deadline = time.monotonic() + timeout
        while True:
            try:
                line = self._queue.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise AssertionError(f"no line with {text!r} within {timeout:.0f} s: {self.lines}") from None
            if line is None:
                raise AssertionError(f"ended (exit {self.proc.wait()}) before {text!r}: {self.lines}\n"
                                     f"{self.proc.stderr.read()}")
            if text in line:
                return line

    def kill(self) -> None:
        if self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(30)


def test_sigint_during_down_is_described_by_status_and_a_second_down_finishes(fresh):
    cluster = fresh
    up(cluster, cluster.recipe_path)
    down = Lines("down", "-i", cluster.inventory_path)
    try:
        down.wait_for("spark-2: removed")  # peers first: the head is next
        down.proc.send_signal(signal.SIGINT)
        _out, err = down.proc.communicate(timeout=120)
    finally:
        down.kill()
    assert down.proc.returncode == 130, err
    assert "Traceback" not in err and "interrupt" in err.lower(), err
    held = containers(cluster)
    assert not [k for k in held if k[0] == "spark-2"], held
    code, report = status(cluster, "--no-probe")
    assert_status_truthful(cluster)
    if held:  # the head still there: down said so, and status must not call it serving
        assert "spark-1: interrupted (Ctrl-C) before it removed" in err and "down` again" in err, err
        assert code == 1 and not any(d["ok"] for d in report["deployments"]), report
        assert any("rank 1 has no container" in p for d in report["deployments"] for p in d["problems"]), report
    lock = spark_deploy("lock", "-i", cluster.inventory_path, "--json")
    assert lock.returncode == 0 and cli_json.result(lock.stdout)["held"] is False, lock.stdout

    again = spark_deploy("down", "-i", cluster.inventory_path)
    assert again.returncode == 0, again.stdout + again.stderr
    assert containers(cluster) == {}
    code, report = status(cluster, "--no-probe")
    assert report["containers"] == [] and report["deployments"] == [], report
    up(cluster, cluster.recipe_path)  # and the cluster deploys again


# ---- bench --compare whose B dies at start ------------------------------------------------------------


def _named(src, dest, name: str, env: dict | None = None):
    from ruamel.yaml import YAML

    yaml = YAML()
    doc = yaml.load(src.read_text())
    doc["name"] = name
    for key, value in (env or {}).items():
        doc["env"][key] = value
    with dest.open("w") as handle:
        yaml.dump(doc, handle)
    return dest


def test_bench_compare_whose_b_dies_at_start_names_b_and_a_serves_again(fresh, tmp_path):
    cluster = fresh
    a = _named(cluster.recipe_path, tmp_path / "base.yaml", "base")
    b = _named(cluster.recipe_path, tmp_path / "crashy.yaml", "crashy", env={"SIM_FAULT_CRASH_AT_START": "1"})
    up(cluster, a)
    plan_a = history(cluster)[1]["plan_hash"]

    run = spark_deploy("bench", "--compare", a, b, "--blocks", "AB", "-i", cluster.inventory_path,
                       "--profile", "code", "--shots", "1", "--warmup", "0", "--max-tokens", "16", timeout=600)
    said = run.stderr + run.stdout
    assert run.returncode == 1, said
    assert "B (crashy, " in run.stderr and "up failed" in run.stderr and "CUDA driver initialization failed" in run.stderr, said
    assert "spark-" in run.stderr, said
    code, report = status(cluster)
    assert code == 0 and [d["recipe"] for d in report["deployments"]] == ["base"], report
    assert running_plans(cluster) == {n: {plan_a} for n in NODES}
    assert completion(cluster)


# ---- boot enable failing on the second node -----------------------------------------------------------

FULL_SUDO = "spark ALL=(root) NOPASSWD: ALL\n"
# root for writing and removing files, but not for systemctl: `sudo -n systemctl ...` asks for a password
NO_SYSTEMCTL = "spark ALL=(root) NOPASSWD: /usr/bin/true, /usr/bin/install, /usr/bin/rm\n"


def _write(cluster, node: int, path: str, text: str) -> None:
    cluster.exec(node, ["sh", "-c", 'printf %s "$1" > "$2"', "sh", text, path])


def _sudoers(cluster, node: int, line: str) -> None:
    _write(cluster, node, SUDOERS, line)
    cluster.exec(node, ["chmod", "0440", SUDOERS])


def _enabled(cluster, node: int, unit: str) -> str:
    return cluster.exec(node, ["systemctl", "is-enabled", unit], check=False).stdout.strip()


def _policy(cluster, node: int, container: str) -> str:
    return node_docker(cluster, node, "inspect", "--format", "{{.HostConfig.RestartPolicy.Name}}", container,
                       check=True).stdout.strip()


def _serving_ids(cluster) -> dict[int, str]:
    return {n: node_docker(cluster, n, "ps", "-q", "--filter", "label=spark-deploy.managed=true",
                           check=True).stdout.strip() for n in (1, 2)}


def test_boot_enable_failing_on_the_second_node_puts_the_first_back(systemd_pair):
    from orchestrator.config.load import load_inventory
    from orchestrator.render.unit import UNIT_DIR, unit_name

    cluster = systemd_pair
    inv, recipe = cluster.inventory_path, cluster.recipe_path
    ours = f"{UNIT_DIR}/{unit_name(load_inventory(inv)[0].cluster, 'sim-tiny')}"
    up(cluster, recipe)
    serving = _serving_ids(cluster)
    policies = {n: _policy(cluster, n, serving[n]) for n in (1, 2)}
    # on spark-1, two things of another stack come back on boot: what `enable --yes` turns off there first
    node_docker(cluster, 1, "tag", "vllm-sim:latest", "other/vllm:old", check=True)
    _write(cluster, 1, f"{UNIT_DIR}/old-stack.service", OLD_STACK)
    cluster.exec(1, ["systemctl", "daemon-reload"])
    cluster.exec(1, ["systemctl", "enable", "old-stack.service"])
    node_docker(cluster, 1, "run", "-d", "--restart", "unless-stopped", "--name", "legacy", "--entrypoint", "sleep",
                "other/vllm:old", "infinity", check=True)
    try:
        _sudoers(cluster, 1, FULL_SUDO)
        _sudoers(cluster, 2, NO_SYSTEMCTL)
        r = spark_deploy("boot", "enable", recipe, "-i", inv, "--yes")
        assert r.returncode == 1, r.stdout + r.stderr
        assert "spark-2: could not install" in r.stderr and "password" in r.stderr, r.stderr
        assert "put back as it was" in r.stderr and "NOT put back" not in r.stderr, r.stderr
        assert _enabled(cluster, 1, "old-stack.service") == "enabled", "turned off on spark-1 and left off"
        assert _policy(cluster, 1, "legacy") == "unless-stopped"
        for n in (1, 2):
            assert cluster.exec(n, ["test", "-e", ours], check=False).code != 0, f"spark-{n}: {ours} left behind"
            assert _enabled(cluster, n, ours.rsplit("/", 1)[1]) not in ("enabled", "disabled"), f"spark-{n}"
            assert _policy(cluster, n, serving[n]) == policies[n], f"spark-{n}: the restart policy is not put back"
        assert _serving_ids(cluster) == serving and completion(cluster)
        audit = cli_json.result(spark_deploy("audit", "-i", inv, "--json").stdout)
        assert [(a["action"], a["outcome"]) for a in audit][-1] == ("boot-enable", "failed"), audit[-1]
        assert "unit old-stack.service enabled again" in audit[-1]["detail"], audit[-1]

        # an earlier unit file of ours that a failed enable overwrote is written back as it was, still enabled
        _sudoers(cluster, 2, FULL_SUDO)
        r = spark_deploy("boot", "enable", recipe, "-i", inv, "--yes")
        assert r.returncode == 0, r.stdout + r.stderr
        earlier = cluster.exec(1, ["cat", ours]).stdout + "# an earlier version of ours\n"
        _write(cluster, 1, ours, earlier)
        _sudoers(cluster, 2, NO_SYSTEMCTL)
        r = spark_deploy("boot", "enable", recipe, "-i", inv, "--yes")
        assert r.returncode == 1 and "spark-2: could not install" in r.stderr, r.stdout + r.stderr
        assert cluster.exec(1, ["cat", ours]).stdout == earlier
        assert _enabled(cluster, 1, ours.rsplit("/", 1)[1]) == "enabled"
    finally:
        for n in (1, 2):
            cluster.exec(n, ["rm", "-f", SUDOERS])


# ---- maintenance begin --stop failing on the peer -----------------------------------------------------


def _window(cluster) -> dict:
    return json.loads(cluster.exec(1, ["sh", "-c", f"cat {NODE_STATE_DIR}/maintenance/*.json"]).stdout)


def test_begin_stop_with_the_peer_unreachable_stops_nothing_and_opens_no_window(fresh):
    cluster = fresh
    up(cluster, cluster.recipe_path)
    serving = _serving_ids(cluster)
    cluster.fault(2, "stop-sshd")
    try:
        begin = spark_deploy("maintenance", "begin", cluster.recipe_path, "-i", cluster.inventory_path, "--stop")
    finally:
        cluster.fault(2, "start-sshd")
    said = begin.stdout + begin.stderr
    assert begin.returncode == 1, said
    assert "--stop stops every rank" in begin.stderr and "spark-2: " in begin.stderr, said
    assert "nothing was stopped and no window was opened" in begin.stderr, said
    assert _serving_ids(cluster) == serving, "a rank was stopped although the peer could not be"
    assert history(cluster)[1]["outcome"] == "serving"
    assert cluster.exec(1, ["sh", "-c", f"ls {NODE_STATE_DIR}/maintenance/*.json"], check=False).code != 0
    assert_serves(cluster, history(cluster)[1]["plan_hash"], 1)
    audit = cli_json.result(spark_deploy("audit", "-i", cluster.inventory_path, "--json").stdout)
    assert audit[-1]["action"] == "maintenance-begin" and audit[-1]["outcome"] != "ok", audit[-1]


def _sessions_killed(cluster, node: int) -> None:
    """The node's sshd listener stopped, then every sshd process left (the open sessions) killed by PID: the
    controller's connection drops at once, and a new one is refused."""
    cluster.fault(node, "stop-sshd")
    pids = cluster.exec(node, ["pgrep", "-x", "sshd"], check=False).stdout.split()
    if pids:
        cluster.exec(node, ["kill", "-KILL", *pids], check=False)


def _wait_for_process(cluster, node: int, pattern: str, proc, bound: float = 180) -> None:
    deadline = time.monotonic() + bound
    while time.monotonic() < deadline:
        if cluster.exec(node, ["pgrep", "-f", pattern], check=False).code == 0:
            return
        assert proc.poll() is None, f"the command ended (exit {proc.returncode}) before {pattern!r} ran on {node}"
        time.sleep(0.05)
    raise AssertionError(f"no {pattern!r} on spark-{node} within {bound:.0f} s")


def test_begin_stop_whose_peer_drops_mid_stop_ends_fully_stopped_and_end_brings_it_back(fresh, background):
    cluster = fresh
    up(cluster, cluster.recipe_path)
    serving = _serving_ids(cluster)
    plan = history(cluster)[1]["plan_hash"]
    # the peer's rank hangs (its PID 1 stopped): `docker stop` waits out its 10 s grace before SIGKILL,
    # and while it waits the peer's SSH dies
    node_docker(cluster, 2, "kill", "--signal", "STOP", serving[2], check=True)
    run = background("maintenance", "begin", cluster.recipe_path, "-i", cluster.inventory_path, "--stop")
    try:
        _wait_for_process(cluster, 2, f"docker stop --time 10 {serving[2]}", run.proc)
        _sessions_killed(cluster, 2)
        code = run.finish(timeout=300)
    finally:
        cluster.fault(2, "start-sshd")
    said = run.stdout() + run.stderr()
    assert code == 1, said
    assert "spark-2: could not stop the release cleanly" in run.stderr(), said
    assert "release 1 is stopped on every node that answered and recorded as stopped" in run.stderr(), said
    assert running_plans(cluster)["spark-1"] == set(), "the head must not be left running alone"
    # the peer's engine finishes the `docker stop` it was given (SIGKILL after the grace) by itself
    deadline = time.monotonic() + 60
    while running_plans(cluster)["spark-2"] and time.monotonic() < deadline:
        time.sleep(0.5)
    assert running_plans(cluster) == {n: set() for n in NODES}, "fully stopped: no rank left running"
    assert history(cluster)[1]["outcome"] == "stopped"
    assert {s["node"] for s in _window(cluster)["stopped"]} == set(NODES)
    code, report = status(cluster, "--no-probe")
    assert code == 1 and not any(d["ok"] for d in report["deployments"]), report

    end = spark_deploy("maintenance", "end", "-i", cluster.inventory_path, timeout=600)
    assert end.returncode == 0, end.stdout + end.stderr
    assert running_plans(cluster) == {n: {plan} for n in NODES}
    assert completion(cluster)
    assert _window(cluster)["state"] == "closed"
