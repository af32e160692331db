"""Root on a node (deploy/privilege.py) and the state dir's writability (checks/writable.py): the pure parts."""

from __future__ import annotations

import subprocess

from orchestrator.checks import writable
from orchestrator.deploy import privilege


def test_root_sudo_or_none_and_what_each_runs():
    root = privilege.parse("spark-1", "root root\n")
    assert root.prefix == () and root.argv(["systemctl", "enable", "x"]) == ["systemctl", "enable", "x"]
    sudo = privilege.parse("spark-1", "sudo spark\n")
    assert sudo.argv(["systemctl", "daemon-reload"]) == ["sudo", "-n", "systemctl", "daemon-reload"]
    none = privilege.parse("spark-2", "none spark sudo: a password is required\n")
    assert none.prefix is None and none.user == "spark" and none.why == "sudo: a password is required"
    assert privilege.refusal({"spark-1": sudo}, "boot enable") is None
    said = privilege.refusal({"spark-1": root, "spark-2": none}, "boot enable (it installs X)")
    assert said.startswith("boot enable (it installs X) needs root on the node; spark-2: spark is not root and "
                           "`sudo -n` fails (sudo: a password is required). Nothing was changed.")
    assert "spark-1" not in said and "passwordless sudo" in said
    assert privilege.parse("n", "none spark\n").why == "sudo is not installed"


def test_the_privilege_probe_runs_under_sh():
    out = subprocess.run(["sh", "-c", privilege._PROBE], capture_output=True, text=True, check=True).stdout
    assert out.split()[0] in ("root", "sudo", "none"), out


def test_state_dir_probe_parsed():
    assert writable.parse("user spark\nok spark:spark 755\n", "/var/lib/sd") == \
        (True, "/var/lib/sd writable by spark (spark:spark 755)", "spark")
    good, seen, _ = writable.parse("user spark\nunwritable root:root 755\n", "/var/lib/sd")
    assert not good and seen == "/var/lib/sd (root:root 755): not writable by spark"
    good, seen, _ = writable.parse("user spark\nunwritable spark:spark 755 /var/lib/sd/lock\n", "/var/lib/sd")
    assert not good and seen == "/var/lib/sd (spark:spark 755): /var/lib/sd/lock inside it is not writable by spark"
    assert writable.parse("user spark\ncreatable /home/spark\n", "/home/spark/sd")[0]
    good, seen, _ = writable.parse("user spark\nuncreatable /var/lib root:root 755\n", "/var/lib/sd")
    assert not good and seen == "/var/lib/sd absent, and spark cannot create it in /var/lib (root:root 755)"


def test_state_dir_probe_under_sh(tmp_path):
    ok = tmp_path / "state"
    ok.mkdir()
    run = lambda path: subprocess.run(["sh", "-c", writable.PROBE, "sh", str(path)], capture_output=True,
                                      text=True, check=True).stdout
    assert writable.parse(run(ok), str(ok))[0]
    assert "creatable" in run(tmp_path / "new" / "deeper")
    assert writable.owner_fix("spark", "/var/lib/sd", ["spark-2"]).startswith(
        "`sudo install -d -o spark -g spark /var/lib/sd` on spark-2")
