"""The transport on the real sshd of the simulated cluster: the channel bound, true deadlines, and that
whatever is killed (timeout, cancel token, Ctrl-C, a stopped or closed stream) leaves no process on the node."""

from __future__ import annotations

import signal
import threading
import time

import pytest
from signal_child import signal_child

from orchestrator.config.load import load_inventory
from orchestrator.sim.cluster import SimCluster
from orchestrator.transport.cancel import Cancelled
from orchestrator.transport.group import Cluster, GroupError, on_all
from orchestrator.transport.node import SESSION_RETRY, NodeTimeout


pytestmark = pytest.mark.integration


def processes(sim: SimCluster, node: int, marker: str) -> list[str]:
    """Processes on the node whose command line contains `marker` (the node's own ps, not ours)."""
    out = sim.exec(node, ["ps", "-eo", "pid=,args="]).stdout
    return [line.strip() for line in out.splitlines() if marker in line and "ps -eo" not in line]


def wait_gone(sim: SimCluster, marker: str, bound: float = 3.0) -> dict[int, list[str]]:
    """Poll both nodes until no process carries `marker`, for at most `bound` s; what is left."""
    deadline = time.monotonic() + bound
    while True:
        left = {n: p for n in (1, 2) if (p := processes(sim, n, marker))}
        if not left or time.monotonic() > deadline:
            return left
        time.sleep(0.1)


def wait_present(sim: SimCluster, node: int, marker: str, bound: float = 10.0) -> None:
    deadline = time.monotonic() + bound
    while not processes(sim, node, marker):
        assert time.monotonic() < deadline, f"{marker!r} never started on node {node}"
        time.sleep(0.05)


def test_many_parallel_commands_on_one_connection_stay_under_max_sessions(conns):
    head = conns.head
    results = on_all(range(20), lambda i: head.run(["sleep", "0.3"], check=True), str)
    assert len(results) == 20
    assert 1 < head.peak_channels <= 8


def test_without_the_bound_sshd_refuses_channels(pair):
    """12 at once (sshd allows 10): the last ones are refused even after the brief retry."""
    inventory, _ = load_inventory(pair.inventory_path)
    retry = 1.0  # the tool's own bound (SESSION_RETRY, 10 s) shortened: the refusal is the event, not the wait
    assert retry < SESSION_RETRY
    unbounded = Cluster(inventory, max_channels=12, session_retry=retry).open()
    try:
        with pytest.raises(GroupError) as caught:
            on_all(range(12), lambda i: unbounded.head.run(["sleep", str(retry + 3)], check=True), str)
        assert "sshd refused a channel" in str(caught.value)
    finally:
        unbounded.close()


def test_timeout_is_a_deadline_and_kills_the_remote_command(conns, pair):
    head = conns.head
    started = time.monotonic()
    with pytest.raises(NodeTimeout, match="did not finish within 1 s"):
        head.run(["sh", "-c", "while :; do echo busy; sleep 0.2; done; : sd-deadline-1"], timeout=1)
    assert time.monotonic() - started < 3
    with pytest.raises(NodeTimeout, match="printed nothing for 1 s"):
        head.run(["sh", "-c", "sleep 30; : sd-idle-1"], timeout=None, idle_timeout=1)
    assert wait_gone(pair, "sd-deadline-1") == {} and wait_gone(pair, "sd-idle-1") == {}


def test_the_cancel_token_kills_every_in_flight_command(conns, pair):
    threading.Thread(target=lambda: (wait_present(pair, 2, "sd-cancel-1"), conns.cancel.set("test"))).start()
    started = time.monotonic()
    with pytest.raises(Cancelled, match="test"):
        conns.each(lambda conn: conn.run(["sh", "-c", "sleep 60; : sd-cancel-1"], timeout=None))
    assert time.monotonic() - started < 12
    assert wait_gone(pair, "sd-cancel-1") == {}
    with pytest.raises(Cancelled):
        conns.head.run(["true"])  # nothing new starts once cancelled
    assert conns.head.run(["true"], shield=True).ok  # but cleanup can


GROUP_CALL = """
import json, subprocess, sys, threading, time
from orchestrator.config.load import load_inventory
from orchestrator.transport.group import Cluster
inventory_path, containers = sys.argv[1], sys.argv[2:]
conns = Cluster(load_inventory(inventory_path)[0]).open()

def announce():  # `ready` once the remote command runs on every node: the signal lands mid-call
    for _ in range(1200):
        if all(subprocess.run(["docker", "exec", c, "pgrep", "-f", "sd-sigint-1"], capture_output=True).returncode
               == 0 for c in containers):
            print("ready", flush=True)
            return
        time.sleep(0.05)

threading.Thread(target=announce, daemon=True).start()
out = {}
try:
    conns.each(lambda conn: conn.run(["sh", "-c", "sleep 60; : sd-sigint-1"], timeout=None))
except BaseException as exc:
    out = {"raised": type(exc).__name__, "at": time.monotonic(), "reason": conns.cancel.reason}
conns.close()
print(json.dumps(out), flush=True)
"""


def test_ctrl_c_during_a_group_call_returns_at_once_and_kills_both_nodes(pair):
    """A real Ctrl-C (SIGINT) to a process blocked in a group call, once both remote commands run: it returns
    at once and both remote process groups are killed. The signal goes to a child, never to pytest."""
    out, sent = signal_child(GROUP_CALL, signal.SIGINT,
                             args=[str(pair.inventory_path), *(n.container for n in pair.nodes())])
    assert out["raised"] == "KeyboardInterrupt" and out["reason"] == "interrupted (Ctrl-C)", out
    assert out["at"] - sent < 5, out
    assert wait_gone(pair, "sd-sigint-1") == {}


def test_a_stopped_or_closed_log_stream_leaves_no_docker_logs_behind(conns, pair):
    image = pair.info()["images"]["vllm"]
    pair.exec(1, ["docker", "run", "-d", "--name", "sd-quiet", "--entrypoint", "sleep", image, "3600"])
    try:
        stop = threading.Event()
        lines: list[str] = []
        follow = ["docker", "logs", "--follow", "sd-quiet"]
        streamer = threading.Thread(target=lambda: lines.append(str(conns.head.stream(follow, lines.append, stop))))
        streamer.start()
        wait_present(pair, 1, "docker logs --follow sd-quiet")
        stop.set()
        streamer.join(5)
        assert lines == ["-1"]
        assert wait_gone(pair, "docker logs --follow sd-quiet") == {}

        # never stopped: closing the connection (as `up` does when it ends) ends it on the node
        threading.Thread(target=conns.head.stream, args=(follow, lines.append), daemon=True).start()
        wait_present(pair, 1, "docker logs --follow sd-quiet")
        conns.close()
        assert wait_gone(pair, "docker logs --follow sd-quiet") == {}
    finally:
        pair.exec(1, ["docker", "rm", "-f", "sd-quiet"], check=False)


def test_a_successful_up_leaves_no_log_follower_on_any_node(pair):
    """Issue 8 item 3: the watcher's `docker logs --follow` ends when `up` ends (it used to run forever)."""
    from deploy_helpers import spark_deploy

    result = spark_deploy("up", pair.recipe_path, "-i", pair.inventory_path)
    try:
        assert result.returncode == 0, result.stderr + result.stdout
        assert wait_gone(pair, "docker logs --follow", bound=2.0) == {}
        assert wait_gone(pair, "sdjob", bound=0.5) == {}, "no wrapped command of ours is left either"
    finally:
        assert spark_deploy("down", "-i", pair.inventory_path).returncode == 0
