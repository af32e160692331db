"""`maintenance begin|verify|end` on a simulated cluster whose nodes run real systemd as PID 1 (issue 11,
acceptance 2 and 4): a driver update and a reboot on spark-2 are shown side by side with the baseline, with
what they mean, and block `end`; a window with the release stopped, both nodes rebooted, ends with the
release serving again through the normal rollback, and the audit log holds the window with its reason."""

from __future__ import annotations

import json
import re

import pytest
from deploy_helpers import completion, node_docker, spark_deploy

from orchestrator.sim.state import NODE_STATE_DIR
import cli_json

pytestmark = pytest.mark.integration

NEW_DRIVER = "580.165.02"


@pytest.fixture
def fresh(systemd_pair):
    """The shared systemd pair (a reboot is a real boot there); the loan's reset clears releases, audit,
    lock, window and faults before and after."""
    yield systemd_pair
    for node in (1, 2):
        systemd_pair.fault(node, "gpu", reset="true")


def sd(cluster, *args, timeout: float = 600):
    return spark_deploy(*args, "-i", cluster.inventory_path, timeout=timeout)


def serve(cluster) -> None:
    result = sd(cluster, "up", cluster.recipe_path)
    assert result.returncode == 0, result.stderr + result.stdout


def baseline_on(cluster, node: int) -> dict:
    files = cluster.exec(node, ["sh", "-c", f'cat {NODE_STATE_DIR}/maintenance/*.json']).stdout
    return json.loads(files)


def containers(cluster, node: int) -> dict[str, str]:
    """name -> status of every spark-deploy container on the node."""
    out = node_docker(cluster, node, "ps", "-a", "--filter", "label=spark-deploy.managed=true",
                      "--format", "{{.Names}} {{.State}}", check=True).stdout
    return dict(line.split(" ", 1) for line in out.splitlines() if line.strip())


def audit_lines(cluster) -> list[dict]:
    result = sd(cluster, "audit", "--json")
    assert result.returncode == 0, result.stderr
    return cli_json.result(result.stdout)


def test_a_driver_update_and_reboot_on_spark_2_is_shown_beside_the_baseline_and_blocks_end(fresh):
    cluster = fresh
    serve(cluster)
    begin = sd(cluster, "maintenance", "begin", cluster.recipe_path, "--reason", "NVIDIA driver update")
    assert begin.returncode == 0, begin.stderr + begin.stdout
    assert "what comes back on boot" in begin.stdout and "release 1" in begin.stdout
    for node in (1, 2):
        base = baseline_on(cluster, node)
        assert base["state"] == "open" and base["release"] == 1 and base["reason"] == "NVIDIA driver update"
        assert set(base["nodes"]) == {"spark-1", "spark-2"}
        assert base["nodes"]["spark-2"]["image"]["present"] and base["nodes"]["spark-2"]["model"]["files"]
        assert base["nodes"]["spark-2"]["units_enabled"] is not None  # systemd answered: units were read
    old_driver = baseline_on(cluster, 1)["nodes"]["spark-2"]["gpu"]["driver"]
    assert old_driver != NEW_DRIVER

    again = sd(cluster, "maintenance", "begin", cluster.recipe_path)
    assert again.returncode == 2 and "already open" in again.stderr and "NVIDIA driver update" in again.stderr

    cluster.fault(2, "gpu", driver=NEW_DRIVER)  # the update, visible before the reboot already
    early = sd(cluster, "maintenance", "verify", "--json")
    assert early.returncode == 1, early.stderr + early.stdout
    assert [(c["node"], c["fact"], c["before"], c["after"]) for c in cli_json.result(early.stdout)["changes"]] == [
        ("spark-2", "driver", old_driver, NEW_DRIVER)]

    cluster.fault(2, "reboot")
    verify = sd(cluster, "maintenance", "verify")
    assert verify.returncode == 1, verify.stderr + verify.stdout
    row = re.search(rf"driver\s*│\s*spark-2\s*│\s*{re.escape(old_driver)}\s*│\s*{re.escape(NEW_DRIVER)}", verify.stdout)
    assert row, verify.stdout
    assert re.search(rf"driver\s*│\s*spark-1\s*│\s*{re.escape(old_driver)}\s*│\s*{re.escape(old_driver)}", verify.stdout)
    assert f"changed: driver {old_driver} → {NEW_DRIVER} on spark-2 — must re-check flags" in verify.stdout
    assert "what it means for the release:" in verify.stdout and "vllm-flags" in verify.stdout
    data = cli_json.result(sd(cluster, "maintenance", "verify", "--json").stdout)
    assert [(c["node"], c["fact"], c["consequence"], c["blocks"]) for c in data["changes"]] == [
        ("spark-2", "driver", "must re-check flags", True)]  # the reboot itself changed nothing else
    assert data["serves_again"] is False  # the peer's container did not come back by itself

    before = {n: containers(cluster, n) for n in (1, 2)}
    refused = sd(cluster, "maintenance", "end")
    assert refused.returncode == 1 and "Nothing was started" in refused.stderr and "--force" in refused.stderr
    assert "refused (blocking-changes)" in refused.stderr
    assert f"driver {old_driver} → {NEW_DRIVER} on spark-2" in refused.stderr
    assert {n: containers(cluster, n) for n in (1, 2)} == before

    forced = sd(cluster, "maintenance", "end", "--force")  # the rollback's own preflight still refuses it
    assert forced.returncode == 1 and "gpu-parity" in forced.stderr + forced.stdout
    assert "the window stays open" in forced.stderr
    assert baseline_on(cluster, 2)["state"] == "open"
    assert audit_lines(cluster)[-1]["action"] == "maintenance-end" and audit_lines(cluster)[-1]["outcome"] == "failed"

    cluster.fault(2, "gpu", driver=old_driver)  # the driver put back: nothing blocks any more
    end = sd(cluster, "maintenance", "end")
    assert end.returncode == 0, end.stderr + end.stdout
    assert completion(cluster)
    assert baseline_on(cluster, 1)["state"] == "closed"
    closed = sd(cluster, "maintenance", "verify")
    assert closed.returncode == 2 and "no maintenance window is open" in closed.stderr


def test_a_stopped_release_comes_back_after_both_nodes_reboot_and_the_audit_log_holds_the_window(fresh):
    cluster = fresh
    serve(cluster)
    plan = {name: status for n in (1, 2) for name, status in containers(cluster, n).items()}
    assert set(plan.values()) == {"running"}
    begin = sd(cluster, "maintenance", "begin", cluster.recipe_path, "--stop", "--reason", "DGX OS update")
    assert begin.returncode == 0, begin.stderr + begin.stdout
    assert "release 1 is stopped" in begin.stdout
    for n in (1, 2):  # stopped and kept under the names they served under (never renamed), as `up` keeps them
        kept = containers(cluster, n)
        assert len(kept) == 1 and all(s == "exited" for s in kept.values()), kept
        assert set(kept) <= set(plan), (kept, plan)
    assert baseline_on(cluster, 1)["stopped"] and baseline_on(cluster, 2)["stopped"]
    history = cli_json.result(sd(cluster, "history", "--json").stdout)
    assert [(r["id"], r["outcome"], r["serving"]) for r in history] == [(1, "stopped", False)]

    cluster.fault(1, "reboot")  # the head first, then the peer
    cluster.fault(2, "reboot")
    verify = sd(cluster, "maintenance", "verify", "--json")
    assert verify.returncode == 0, verify.stderr + verify.stdout
    assert cli_json.result(verify.stdout)["consequences"][0]["consequence"] == "safe to bring back"

    end = sd(cluster, "maintenance", "end")
    assert end.returncode == 0, end.stderr + end.stdout
    assert "release 1 serves again as release 2" in end.stdout
    assert completion(cluster)
    running = {n: containers(cluster, n) for n in (1, 2)}
    assert {name for n in running for name, s in running[n].items() if s == "running"} == {
        name for name in plan}, running  # started again under their serving names
    status = cli_json.result(sd(cluster, "status", "--json").stdout)
    assert status["ok"], status
    history = cli_json.result(sd(cluster, "history", "--json").stdout)
    assert history[0]["id"] == 2 and history[0]["serving"] and history[0]["rollback_of"] == 1

    lines = audit_lines(cluster)
    opened = [line for line in lines if line["action"] == "maintenance-begin"]
    ended = [line for line in lines if line["action"] == "maintenance-end"]
    assert len(opened) == 1 and opened[0]["reason"] == "DGX OS update" and opened[0]["release"] == 1
    assert len(ended) == 1 and ended[0]["reason"] == "DGX OS update" and ended[0]["window_outcome"] == "brought back"
    assert ended[0]["opened_at"] == opened[0]["opened_at"] and ended[0]["closed_at"] > ended[0]["opened_at"]  # ISO, one zone
    assert "rollback" not in [line["action"] for line in lines[lines.index(opened[0]):]], \
        "maintenance end writes ONE audit line: its rollback is a part of it"
    assert [(p["action"], p["outcome"], p.get("release")) for p in ended[0]["parts"]] == [("rollback", "serving", 2)]
    assert baseline_on(cluster, 2)["state"] == "closed"


OLD_STACK = """[Unit]
Description=The old vLLM stack (field note 9)
After=docker.service
[Service]
ExecStart=/usr/bin/docker run --rm --name old-stack --entrypoint sleep other/vllm:old infinity
[Install]
WantedBy=multi-user.target
"""


def test_begin_names_another_stack_that_comes_back_on_boot_per_node_and_still_writes_the_baseline(fresh):
    """Acceptance 1, the `maintenance begin` half (`preflight`'s half is in test_boot.py)."""
    cluster = fresh
    serve(cluster)
    node_docker(cluster, 2, "tag", "vllm-sim:latest", "other/vllm:old", check=True)
    cluster.exec(2, ["sh", "-c", 'printf %s "$1" > /etc/systemd/system/old-stack.service', "sh", OLD_STACK])
    try:
        cluster.exec(2, ["systemctl", "daemon-reload"])
        cluster.exec(2, ["systemctl", "enable", "old-stack.service"])
        node_docker(cluster, 2, "run", "-d", "--restart", "unless-stopped", "--name", "legacy", "--entrypoint",
                    "sleep", "other/vllm:old", "infinity", check=True)
        begin = sd(cluster, "maintenance", "begin", cluster.recipe_path, "--reason", "firmware")
        assert begin.returncode == 1, begin.stderr + begin.stdout
        out = " ".join(begin.stdout.split())
        assert "spark-2: unit old-stack.service comes back but is another stack" in out
        assert "spark-2: container legacy comes back but is another stack" in out
        assert "spark-1: unit old-stack.service" not in out and "spark-1: container legacy" not in out
        assert "preflight boot" in out and "the window is open, with problems" in begin.stderr
        base = baseline_on(cluster, 1)
        assert base["state"] == "open" and not base["preflight_ok"]
        assert any(line.startswith("boot (spark-2") for line in base["preflight_failed"])
        on_boot = {(e["kind"], e["name"]): e["match"] for e in base["nodes"]["spark-2"]["on_boot"]}
        assert on_boot[("unit", "old-stack.service")] == on_boot[("container", "legacy")] == \
            "comes back but is another stack"
        assert "old-stack.service" in base["nodes"]["spark-2"]["units_enabled"]
        assert "old-stack.service" not in base["nodes"]["spark-1"]["units_enabled"]

        # fixed during the window: verify shows it, and that is no reason to hold the release back
        cluster.exec(2, ["systemctl", "disable", "old-stack.service"])
        node_docker(cluster, 2, "rm", "-f", "legacy", check=True)
        verify = sd(cluster, "maintenance", "verify", "--json")
        data = cli_json.result(verify.stdout)
        assert verify.returncode == 0, data
        changed = {(c["node"], c["fact"]): c for c in data["changes"]}
        assert set(changed) == {("spark-2", "units enabled"), ("spark-2", "restart policies"),
                                ("spark-2", "comes back on boot")}
        assert changed[("spark-2", "restart policies")]["before"] == "legacy: unless-stopped"
        assert "old-stack.service" in changed[("spark-2", "units enabled")]["before"]
        assert "old-stack.service" not in changed[("spark-2", "units enabled")]["after"]
        assert all(c["consequence"] == "what comes back on boot changed" and not c["blocks"] for c in changed.values())
    finally:
        undo = ("systemctl disable old-stack.service; rm -f /etc/systemd/system/old-stack.service; "
                "systemctl daemon-reload; docker rm -f legacy; true")
        cluster.exec(2, ["sh", "-c", undo], check=False)
