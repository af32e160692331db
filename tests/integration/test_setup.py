"""Issue 20 acceptance 1 and 2: `spark-deploy setup` on the simulated Sparks' management addresses.

The shared pair with a Spark's HCA on both nodes (as test_roce.py gives it). setup starts from nothing the
sim wrote (its own known_hosts and inventory under tmp_path; only the login key is the sim's), answers the
host key prompts in a real pty, and must find the sim's fabric (not the management network) by probing,
the HCA and the RoCE v2 GID index from sysfs, and write an inventory `validate` accepts and `up` serves on.
A wrong fingerprint writes nothing; an MTU that differs, a login outside the docker group and a cut fabric
each exit 1 naming node, fact and fix, and leave the old inventory as it was.
"""

from __future__ import annotations

import json
import os
import re

import paramiko
import pexpect
import pytest
from ruamel.yaml import YAML

import cli_json
from deploy_helpers import CLI, completion, spark_deploy
from orchestrator.setup.hostkeys import fingerprint
from orchestrator.sim import node_roce
from orchestrator.sim.state import FABRIC_IFACE, MGMT_IFACE, NODE_STATE_DIR, NODE_USER

pytestmark = pytest.mark.integration


def setup_argv(cluster, tmp_path, *extra: str, user: str = NODE_USER) -> list[str]:
    return ["setup", *(n.ip for n in cluster.nodes()), "--user", user, "--key", str(cluster.key_path),
            "--known-hosts", str(tmp_path / "known_hosts"), "-o", str(tmp_path / "inventory.yaml"),
            "--no-node-keys", *extra]


def in_pty(argv: list[str], answers) -> tuple[int, str]:
    """Run the CLI in a pseudo-terminal; `answers(fingerprint, index)` is typed at each host key prompt."""
    child = pexpect.spawn(CLI[0], CLI[1:] + argv, encoding="utf-8", timeout=60,
                          env={**os.environ, "COLUMNS": "200"}, dimensions=(50, 200))
    index = 0
    while True:
        got = child.expect([r"host key ssh-ed25519 (SHA256:\S+)", pexpect.EOF])
        if got == 1:
            break
        fp = child.match.group(1)
        child.expect(r"\(yes/no/\[fingerprint\]\): ")
        child.sendline(answers(fp, index))
        index += 1
    child.close()
    return child.exitstatus, child.before if isinstance(child.before, str) else ""


def sim_fingerprints(cluster) -> list[str]:
    keys = paramiko.HostKeys(str(cluster.known_hosts_path))
    return [f"{n.ip}={fingerprint(keys.lookup(n.ip)['ssh-ed25519'])}" for n in cluster.nodes()]


def test_setup_finds_the_fabric_and_the_hca_writes_an_inventory_validate_accepts_and_up_serves(roce_pair, tmp_path):
    cluster = roce_pair
    nodes = cluster.nodes()
    transcript: list[str] = []

    # a wrong fingerprint pasted at the first prompt: exit 1, not a byte written
    code, _ = in_pty(setup_argv(cluster, tmp_path), lambda fp, i: "SHA256:" + "A" * 43)
    assert code == 1
    assert not (tmp_path / "known_hosts").exists() and not (tmp_path / "inventory.yaml").exists()

    # the fingerprint pasted for the first node, `yes` for the second
    code, _ = in_pty(setup_argv(cluster, tmp_path), lambda fp, i: transcript.append(fp) or (fp if i == 0 else "yes"))
    assert code == 0, transcript
    assert len(transcript) == 2
    inv = YAML(typ="safe").load((tmp_path / "inventory.yaml").read_text())
    text = (tmp_path / "inventory.yaml").read_text()
    assert inv["interconnect"] == {"profile": "roce", "socket_ifname": FABRIC_IFACE, "hca": node_roce.SPARK_HCA,
                                   "gid_index": node_roce.SPARK_GID_INDEX}
    assert [(n["name"], n["address"], n["fabric_ip"]) for n in inv["nodes"]] == \
        [(n.name, n.ip, n.fabric_ip) for n in nodes]
    assert MGMT_IFACE not in text
    mtus = {cluster.exec(n.index, ["cat", f"/sys/class/net/{FABRIC_IFACE}/mtu"]).stdout.strip() for n in nodes}
    assert len(mtus) == 1
    mtu = next(iter(mtus))
    speed = cluster.exec(nodes[1].index, ["cat", f"/sys/class/net/{FABRIC_IFACE}/speed"]).stdout.strip()
    assert f"fabric_ip: {nodes[1].fabric_ip} # {FABRIC_IFACE} ({speed} Mb/s, mtu {mtu}): every other node " \
           "reached it" in text  # the negotiated speed and MTU, recorded
    assert inv["ssh"]["user"] == NODE_USER and inv["ssh"]["known_hosts"] == str(tmp_path / "known_hosts")
    known = paramiko.HostKeys(str(tmp_path / "known_hosts"))
    assert [fingerprint(known.lookup(n.ip)["ssh-ed25519"]) for n in nodes] == transcript
    # the cluster's identity: given to every node, recorded in the inventory
    held = [json.loads(cluster.exec(n.index, ["cat", f"{NODE_STATE_DIR}/cluster.json"]).stdout) for n in nodes]
    assert held[0] == held[1] and held[0]["id"] == "spark" and inv["cluster_id"] == "spark", held

    shown = spark_deploy(*setup_argv(cluster, tmp_path, "--yes", "--json"))  # again: nothing to change
    assert shown.returncode == 0, shown.stderr
    assert cli_json.result(shown.stdout)["written"] is False and f"mtu {mtus.pop()}" in shown.stdout

    # run again with another cluster name: the difference is shown and a "no" leaves the file as it was
    written = (tmp_path / "inventory.yaml").read_bytes()
    child = pexpect.spawn(CLI[0], CLI[1:] + setup_argv(cluster, tmp_path, "--cluster", "lab"), encoding="utf-8",
                          timeout=60, env={**os.environ, "COLUMNS": "200"}, dimensions=(50, 200))
    child.expect(r"Replace \S+ with this\? \[y/N\] ")
    shown = child.before
    child.sendline("n")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 1 and "-cluster: spark # --cluster" in shown and "+cluster: lab # --cluster" in shown
    assert "-cluster_id" not in shown and "+cluster_id" not in shown, shown  # the head's identity stays: a label
    assert "left as it was (not confirmed)" in child.before
    assert (tmp_path / "inventory.yaml").read_bytes() == written

    valid = spark_deploy("validate", str(cluster.recipe_path), "-i", str(tmp_path / "inventory.yaml"))
    assert valid.returncode == 0, valid.stderr
    up = spark_deploy("up", str(cluster.recipe_path), "-i", str(tmp_path / "inventory.yaml"), "-v", timeout=240)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "NET/IB on every node" in up.stdout
    assert completion(cluster)


def test_problems_a_person_must_fix_exit_1_naming_node_fact_and_fix_and_keep_the_old_inventory(pair, tmp_path):
    cluster = pair
    old = tmp_path / "inventory.yaml"
    old.write_text("# the inventory from before\n" + cluster.inventory_path.read_text())
    before = old.read_bytes()
    pinned = [a for fp in sim_fingerprints(cluster) for a in ("--fingerprint", fp)]

    def setup(user: str = NODE_USER):
        r = spark_deploy(*setup_argv(cluster, tmp_path, "--yes", *pinned, user=user), timeout=120)
        assert r.returncode == 1, r.stdout + r.stderr
        assert old.read_bytes() == before
        return " ".join(r.stdout.split())

    cluster.fault(2, "mtu", mtu=1400)
    try:
        said = setup()
    finally:
        cluster.fault(2, "mtu", reset="true")
    assert f"spark-2: fabric MTU: {FABRIC_IFACE} mtu 1400, not 1500 as on spark-1 1500" in said, said
    assert f"fix: `sudo ip link set dev {FABRIC_IFACE} mtu 1500` on spark-2" in said, said
    assert "left as it was" in said

    cluster.fault(2, "partition", net="fabric")
    try:
        said = setup()
    finally:
        cluster.fault(2, "heal")
    assert "all nodes: fabric: no interface pair on which every node reaches every other directly" in said, said
    assert f"spark-2 -> {cluster.node(1).fabric_ip}" in said and "fix: cable the QSFP ports" in said, said

    user = "nodock"  # a login outside the docker group (a second account on a real Spark)
    public = (cluster.key_path.parent / "id_ed25519.pub").read_text().strip()
    for node in (1, 2):
        cluster.exec(node, ["sh", "-c", 'useradd -m -s /bin/bash "$1" && install -d -m 700 -o "$1" -g "$1" '
                            '"/home/$1/.ssh" && printf "%s\\n" "$2" > "/home/$1/.ssh/authorized_keys" && '
                            'chown "$1:$1" "/home/$1/.ssh/authorized_keys"', "sh", user, public])
    try:
        said = setup(user)
    finally:
        for node in (1, 2):
            cluster.exec(node, ["userdel", "-r", user], check=False)
    for node in ("spark-1", "spark-2"):
        assert f"{node}: docker permission: {user} cannot use the engine (" in said, said
        assert f"fix: `sudo usermod -aG docker {user}` on {node}, then log in again" in said, said
    assert "permission denied" in said.lower(), said


PASSWORD_LOGIN = "/etc/ssh/sshd_config.d/00-setup-test-password.conf"


def test_a_login_no_key_opens_gets_a_new_key_installed_with_the_password_asked_once(pair, tmp_path):
    """A second account as a real Spark has it: password login allowed (DGX OS's sshd default), no key.
    setup makes ~/.ssh/spark-deploy_ed25519 (HOME is tmp_path here), asks the password once in the pty and
    installs the key on both nodes; the password is nowhere after. The state dir belongs to the first
    account, so discovery then stops naming that, with the admin's fix, and writes no inventory."""
    cluster, user, password = pair, "pwuser", f"pw-{os.getpid()}-setup"
    for node in (1, 2):
        cluster.exec(node, ["sh", "-c", 'useradd -m -s /bin/bash -G docker "$1" && printf "%s:%s\\n" "$1" "$2" | '
                            'chpasswd && printf "Match User %s\\n  PasswordAuthentication yes\\n" "$1" > "$3" && '
                            'sshd -t && kill -HUP "$(cat /run/sshd.pid)"', "sh", user, password, PASSWORD_LOGIN])
    prompts: list[str] = []
    try:
        argv = ["setup", *(n.ip for n in cluster.nodes()), "--user", user, "--known-hosts",
                str(tmp_path / "known_hosts"), "-o", str(tmp_path / "inventory.yaml"), "--no-node-keys"]
        child = pexpect.spawn(CLI[0], CLI[1:] + argv, encoding="utf-8", timeout=60, dimensions=(50, 200),
                              env={**os.environ, "HOME": str(tmp_path), "COLUMNS": "200"})
        while True:
            got = child.expect([r"\(yes/no/\[fingerprint\]\): ", r"Password of pwuser on [^:]*: ", pexpect.EOF])
            if got == 2:
                break
            prompts.append(child.after)
            child.sendline("yes" if got == 0 else password)
        said = child.before
        child.close()
        assert child.exitstatus == 1, said
        authorized = [cluster.exec(n, ["cat", f"/home/{user}/.ssh/authorized_keys"]).stdout for n in (1, 2)]
    finally:
        for node in (1, 2):
            cluster.exec(node, ["sh", "-c", 'rm -f "$2"; kill -HUP "$(cat /run/sshd.pid)"; userdel -r "$1"', "sh",
                                user, PASSWORD_LOGIN], check=False)
    assert [p.startswith("Password") for p in prompts] == [False, False, True]  # two host keys, one password
    key = tmp_path / ".ssh" / "spark-deploy_ed25519"
    public = (tmp_path / ".ssh" / "spark-deploy_ed25519.pub").read_text().strip()
    assert key.stat().st_mode & 0o777 == 0o600 and authorized == [public + "\n"] * 2
    flat = " ".join(re.sub(r"\x1b\[[0-9;]*m", "", said).split())  # a terminal's output: styles off
    for node in ("spark-1", "spark-2"):
        assert (f"{node}: state dir: /var/lib/spark-deploy (spark:spark 755): not writable by {user} fix: `sudo "
                f"install -d -o {user} -g {user} /var/lib/spark-deploy` on {node}") in flat, flat
    assert not (tmp_path / "inventory.yaml").exists()
    for path in tmp_path.rglob("*"):
        if path.is_file():
            assert password not in path.read_text(errors="replace"), path
    assert password not in said
