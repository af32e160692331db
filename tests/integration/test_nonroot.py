"""Issue 18 acceptance 5: the simulated Spark's login is a stock DGX OS account, in the docker group, whose
sudo asks for a password; the whole suite and the demo log in as it (`sim up`'s inventory). What the tool
writes on a node works as that user, or fails before anything is started naming the path and the fix.
(`boot enable`, which needs root, is in test_boot.py: refused as this user, working with passwordless sudo.)
"""

from __future__ import annotations

import shlex

import paramiko
import pytest
from ruamel.yaml import YAML

from deploy_helpers import completion, our_containers, recipe_variant, spark_deploy
from orchestrator.sim.state import NODE_STATE_DIR, NODE_USER

pytestmark = pytest.mark.integration


def as_login(cluster, node: int, command: str) -> tuple[int, str]:
    """Run a shell command over SSH as the inventory's login, with the cluster's key and known_hosts only."""
    client = paramiko.SSHClient()
    client.load_host_keys(str(cluster.known_hosts_path))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    user = YAML(typ="safe").load(cluster.inventory_path.read_text())["ssh"]["user"]
    client.connect(cluster.node(node).ip, username=user, key_filename=str(cluster.key_path), look_for_keys=False,
                   allow_agent=False, timeout=30)
    try:
        _, out, err = client.exec_command(f"sh -c {shlex.quote(command)}", timeout=60)
        code = out.channel.recv_exit_status()
        return code, out.read().decode() + err.read().decode()
    finally:
        client.close()


def test_the_login_is_a_docker_group_user_whose_sudo_wants_a_password(pair):
    code, out = as_login(pair, 1, "id -un; id -Gn; docker info --format '{{.ServerVersion}}'; sudo -n true")
    lines = out.splitlines()
    assert lines[0] == NODE_USER != "root", out
    assert "docker" in lines[1].split() and "sudo" in lines[1].split(), out
    assert lines[2].strip(), out  # the engine answers through the docker group
    assert code != 0 and "password is required" in out, out


def test_an_unwritable_state_dir_is_refused_before_anything_starts_naming_path_and_fix(pair, tmp_path):
    assert spark_deploy("up", pair.recipe_path, "-i", pair.inventory_path).returncode == 0
    serving = our_containers(pair)
    changed = recipe_variant(pair, tmp_path / "changed.yaml", extra={"max-num-seqs": 8})
    fix = f"sudo install -d -o {NODE_USER} -g {NODE_USER} {NODE_STATE_DIR}"
    try:
        pair.exec(1, ["chown", "root:root", NODE_STATE_DIR])  # as a fresh node has it: made by root
        pair.exec(1, ["sh", "-c", f'chown -R root:root {NODE_STATE_DIR}/*'])
        up = spark_deploy("up", changed, "-i", pair.inventory_path, timeout=180)
        assert up.returncode == 1, up.stdout + up.stderr
        assert f"spark-1: cannot write the deploy lock {NODE_STATE_DIR}/lock/" in up.stderr, up.stderr
        assert f"as {NODE_USER}" in up.stderr and fix in up.stderr, up.stderr
        assert "another spark-deploy command holds" not in up.stderr
        assert our_containers(pair) == serving and completion(pair)  # the serving release still serves
        pair.exec(1, ["chown", "-R", f"{NODE_USER}:{NODE_USER}", NODE_STATE_DIR])

        pair.exec(2, ["chown", "-R", "root:root", NODE_STATE_DIR])
        up = spark_deploy("up", changed, "-i", pair.inventory_path, timeout=180)
        assert up.returncode == 1, up.stdout + up.stderr
        assert "during preflight" in up.stderr and "state-dir" in up.stderr and "spark-2" in up.stderr, up.stderr
        assert f"{NODE_STATE_DIR} (root:root 755)" in up.stderr and fix in up.stderr, up.stderr
        assert our_containers(pair) == serving and completion(pair)
    finally:
        for n in (1, 2):
            pair.exec(n, ["chown", "-R", f"{NODE_USER}:{NODE_USER}", NODE_STATE_DIR])
    res = spark_deploy("preflight", changed, "-i", pair.inventory_path, "--only", "state-dir")
    assert res.returncode == 0 and f"writable by {NODE_USER}" in res.stdout, res.stdout + res.stderr
    assert spark_deploy("down", "-i", pair.inventory_path).returncode == 0
