"""A reboot on the simulated cluster: systemd as PID 1 (opt-in, `init="systemd"`), and `sim fault NODE reboot`
restarting the node container so that systemd, dockerd and restart policies act as at a real boot.

Everything in a node is driven over real SSH with the cluster's known_hosts (the project's transport), as
another engineer's maintenance code will drive it.
"""

from __future__ import annotations

import time
from pathlib import Path
from collections.abc import Callable

import pytest

from orchestrator.config.load import load_inventory
from orchestrator.sim.cluster import SimCluster
from orchestrator.sim.state import SimInputError
from orchestrator.transport.group import Cluster

from deploy_helpers import spark_deploy

pytestmark = pytest.mark.integration

IMAGE = "vllm-sim:latest"
SLEEPER = ["--entrypoint", "sleep", IMAGE, "infinity"]  # a long-running container of another image
UNIT = """[Unit]
Description=another stack ({name})
After=docker.service
Requires=docker.service

[Service]
ExecStartPre=-/usr/bin/docker rm -f {name}
ExecStart=/usr/bin/docker run --rm --name {name} --entrypoint sleep {image} infinity
ExecStop=/usr/bin/docker stop -t 2 {name}

[Install]
WantedBy=multi-user.target
"""
FAILING_UNIT = """[Unit]
Description=a unit that fails at boot

[Service]
Type=oneshot
ExecStart=/bin/false

[Install]
WantedBy=multi-user.target
"""


def ssh(cluster: SimCluster) -> Cluster:
    """A fresh SSH connection to every node, as root (these tests look at PID 1 and the engine's own dirs),
    through the cluster's root inventory (key + known_hosts only)."""
    inventory, _ = load_inventory(cluster.root_inventory_path)
    return Cluster(inventory).open()


def out(conns: Cluster, node: str, *argv: str) -> str:
    return conns[node].run(list(argv), check=True).stdout.strip()


def wait_for(what: str, probe: Callable[[], bool], timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not probe():
        if time.monotonic() > deadline:
            pytest.fail(f"{what}: still not true after {timeout:.0f}s", pytrace=False)
        time.sleep(0.2)


def running(conns: Cluster, node: str) -> set[str]:
    return set(out(conns, node, "docker", "ps", "--format", "{{.Names}}").split())


def test_pid1_is_systemd_and_dockerd_sshd_are_its_units(systemd_pair):
    assert systemd_pair.info()["init"] == "systemd"
    with ssh(systemd_pair) as conns:
        for node in ("spark-1", "spark-2"):
            assert out(conns, node, "ps", "-p", "1", "-o", "comm=") == "systemd"
            assert out(conns, node, "readlink", "/proc/1/exe").endswith("/systemd")
            assert out(conns, node, "systemctl", "is-active", "docker.service", "ssh.service",
                       "containerd.service").split() == ["active"] * 3
            assert out(conns, node, "systemctl", "is-enabled", "docker.service", "ssh.service").split() == \
                ["enabled"] * 2
            assert conns[node].run(["systemctl", "is-system-running"]).stdout.strip() == "running"
            # the sshd serving this very session is the unit's main process
            sshd = out(conns, node, "systemctl", "show", "-p", "MainPID", "--value", "ssh.service")
            assert out(conns, node, "ps", "-p", sshd, "-o", "comm=") == "sshd"


def test_reboot_brings_back_what_is_enabled_and_what_has_a_restart_policy(systemd_pair):
    with ssh(systemd_pair) as conns:
        n2 = conns["spark-2"]
        n2.put_file("/etc/systemd/system/other-stack.service", UNIT.format(name="other-stack", image=IMAGE))
        n2.put_file("/etc/systemd/system/off-stack.service", UNIT.format(name="off-stack", image=IMAGE))
        out(conns, "spark-2", "systemctl", "daemon-reload")
        n2.run(["systemctl", "enable", "other-stack.service"], check=True)
        assert n2.run(["systemctl", "is-enabled", "other-stack", "off-stack"]).stdout.split() == \
            ["enabled", "disabled"]
        listed = out(conns, "spark-2", "systemctl", "list-unit-files", "--no-legend", "*-stack.service")
        assert {tuple(line.split()[:2]) for line in listed.splitlines()} == \
            {("other-stack.service", "enabled"), ("off-stack.service", "disabled")}
        n2.run(["systemctl", "start", "other-stack.service", "off-stack.service"], check=True)
        out(conns, "spark-2", "docker", "run", "-d", "--name", "keeps", "--restart", "unless-stopped",
            "--stop-timeout", "2", *SLEEPER)
        out(conns, "spark-2", "docker", "run", "-d", "--name", "drops", "--stop-timeout", "2", *SLEEPER)
        wait_for("all four running before the reboot",
                 lambda: {"other-stack", "off-stack", "keeps", "drops"} <= running(conns, "spark-2"))
        assert "active" in n2.run(["systemctl", "status", "--no-pager", "other-stack"]).stdout
        boot_before = out(conns, "spark-2", "cat", "/proc/sys/kernel/random/boot_id")
    known_hosts = systemd_pair.known_hosts_path.read_text()

    res = spark_deploy("sim", "fault", "spark-2", "reboot", "--name", systemd_pair.name)
    assert res.returncode == 0, res.stderr + res.stdout
    assert "spark-2: rebooted (orderly shutdown" in res.stdout and "systemd running" in res.stdout

    assert systemd_pair.known_hosts_path.read_text() == known_hosts  # nothing re-learnt ...
    with ssh(systemd_pair) as conns:  # ... and strict host key checking still accepts the node
        assert out(conns, "spark-2", "cat", "/proc/sys/kernel/random/boot_id") != boot_before
        assert out(conns, "spark-2", "ps", "-p", "1", "-o", "comm=") == "systemd"
        wait_for("the enabled unit's and the unless-stopped container back",
                 lambda: {"other-stack", "keeps"} <= running(conns, "spark-2"))
        assert conns["spark-2"].run(["systemctl", "is-active", "other-stack", "off-stack"]).stdout.split() == \
            ["active", "inactive"]
        now = running(conns, "spark-2")
        assert "off-stack" not in now and "drops" not in now
        state = out(conns, "spark-2", "docker", "inspect", "-f", "{{.State.Status}} {{.RestartCount}}", "drops")
        assert state.split()[0] == "exited"
        # node 1 was not rebooted: same boot
        assert out(conns, "spark-1", "ps", "-p", "1", "-o", "comm=") == "systemd"
        for name in ("other-stack", "off-stack"):
            conns["spark-2"].run(["systemctl", "disable", "--now", f"{name}.service"], check=True)
        conns["spark-2"].run(["docker", "rm", "-f", "keeps", "drops"], check=True)


def test_a_driver_update_before_the_reboot_shows_after_it_and_nothing_else_changes(systemd_pair):
    query = ("nvidia-smi", "--query-gpu=driver_version", "--format=csv,noheader")
    with ssh(systemd_pair) as conns:
        before = {n: out(conns, n, *query) for n in ("spark-1", "spark-2")}
        mem_before = {n: out(conns, n, "grep", "-E", "^Mem(Total|Available):", "/proc/meminfo")
                      for n in ("spark-1", "spark-2")}
    assert before["spark-2"] != "580.165.02"
    systemd_pair.fault("spark-2", "gpu", driver="580.165.02")
    systemd_pair.fault("spark-1", "meminfo", available="2g")
    try:
        lines = systemd_pair.fault("all", "reboot")
        assert [line.split(":")[0] for line in lines] == ["spark-1", "spark-2"]
        with ssh(systemd_pair) as conns:
            assert out(conns, "spark-2", *query) == "580.165.02"
            assert out(conns, "spark-1", *query) == before["spark-1"]  # no fault: the driver is unchanged
            assert "MemAvailable:         2097152 kB" in out(conns, "spark-1", "cat", "/proc/meminfo")
            # the meminfo bind (a DGX Spark's figures) came back with the boot
            assert out(conns, "spark-2", "grep", "-E", "^Mem(Total|Available):", "/proc/meminfo") == \
                mem_before["spark-2"]
            assert out(conns, "spark-2", "systemctl", "is-active", "sim-boot.service") == "active"
    finally:
        systemd_pair.fault("spark-2", "gpu", reset=True)
        systemd_pair.fault("spark-1", "meminfo", reset=True)


def test_a_unit_failing_at_boot_is_named_and_the_node_is_still_ready(systemd_pair):
    with ssh(systemd_pair) as conns:
        conns["spark-2"].put_file("/etc/systemd/system/broken.service", FAILING_UNIT)
        conns["spark-2"].run(["systemctl", "enable", "broken.service"], check=True)
    try:
        result = systemd_pair.reboot("spark-2", ready_timeout=120)
        assert result.readiness.system.value == "degraded"
        assert result.readiness.failed_units == ["broken.service"]
        assert "systemd degraded (failed: broken.service)" in result.describe()
    finally:
        with ssh(systemd_pair) as conns:
            conns["spark-2"].run(["systemctl", "disable", "broken.service"], check=True)
            conns["spark-2"].run(["systemctl", "reset-failed"], check=True)
            assert conns["spark-2"].run(["systemctl", "is-system-running"]).stdout.strip() == "running"


def test_reboot_options_are_checked(systemd_pair):
    with pytest.raises(SimInputError, match="reboot takes"):
        systemd_pair.fault("spark-2", "reboot", bogus="1")
    res = spark_deploy("sim", "fault", "spark-2", "reboot", "timeout=soon", "--name", systemd_pair.name)
    assert res.returncode == 2 and "timeout='soon' is not a number" in res.stderr + res.stdout


def test_the_docker_init_node_reboots_too(sim_cluster_factory):
    cluster = sim_cluster_factory(nodes=1)
    assert cluster.info()["init"] == "docker-init"
    key = cluster.known_hosts_path.read_text()
    cluster.exec(1, ["docker", "run", "-d", "--name", "keeps", "--restart", "unless-stopped",
                     "--stop-timeout", "2", *SLEEPER])
    cluster.fault(1, "fill-disk", free="8m")
    boot_id = "/proc/sys/kernel/random/boot_id"
    boot_before = cluster.exec(1, ["cat", boot_id]).stdout.strip()
    assert boot_before != Path(boot_id).read_text().strip(), "a node's boot is its own, not the host kernel's"
    line = cluster.fault(1, "reboot")[0]
    assert "spark-1: rebooted (orderly shutdown" in line and "docker-init" in line
    assert cluster.known_hosts_path.read_text() == key
    with ssh(cluster) as conns:
        assert out(conns, "spark-1", "ps", "-p", "1", "-o", "comm=") == "docker-init"
        assert out(conns, "spark-1", "cat", boot_id) not in ("", boot_before), "a reboot makes a new boot id"
        wait_for("the unless-stopped container back", lambda: "keeps" in running(conns, "spark-1"))
        assert "MemTotal:       125519872 kB" in out(conns, "spark-1", "cat", "/proc/meminfo")
        # the full disk stayed full (its tmpfs is mounted again at boot)
        assert conns["spark-1"].run(["mountpoint", "-q", "/var/lib/docker/tmp"]).exit_code == 0
    cluster.fault(1, "free-disk")
    assert cluster.exec(1, ["mountpoint", "-q", "/var/lib/docker/tmp"], check=False).code != 0
