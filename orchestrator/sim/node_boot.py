"""A node's readiness after a start, and its reboot: the same bounded wait for both.

Ready = the container is running AND port 22 sends an SSH banner AND the inner `docker info` answers;
on a systemd node also `systemctl is-system-running` is `running` or `degraded` (the failed units are
reported, not hidden). A reboot is `docker stop` (the image's STOPSIGNAL: SIGRTMIN+3 makes systemd shut
down in order, stopping docker.service and so the inner containers; SIGTERM makes sim-entrypoint stop
sshd and dockerd) then `docker start`: the container keeps its disk, binds, volumes and fixed IP, /run
is a fresh tmpfs (systemd node) or emptied (docker-init node), and dockerd applies restart policies
exactly as at any boot.
"""

from __future__ import annotations

import socket
import time
from dataclasses import dataclass, field
from enum import Enum

import docker.errors
from tenacity import (
    Retrying,
    retry_if_exception_type,
    stop_after_delay,
    wait_exponential,
)

from . import node_exec, provision
from .state import INIT_LABEL, NodeInfo, NodeInit, SimError

STOP_TIMEOUT_S = 60  # docker stop's grace before SIGKILL: systemd stops inner containers (10 s each at most)


class NotReady(Exception):
    """A node is alive but not ready yet (retried until the deadline)."""


class SystemState(str, Enum):
    """`systemctl is-system-running` (systemd's own words)."""
    INITIALIZING = "initializing"
    STARTING = "starting"
    RUNNING = "running"
    DEGRADED = "degraded"
    MAINTENANCE = "maintenance"
    STOPPING = "stopping"
    OFFLINE = "offline"
    UNKNOWN = "unknown"


READY_STATES = (SystemState.RUNNING, SystemState.DEGRADED)


@dataclass
class Readiness:
    init: NodeInit
    system: SystemState | None = None   # systemd nodes only
    failed_units: list[str] = field(default_factory=list)

    def summary(self) -> str:
        if self.system is None:
            return "docker-init"
        text = f"systemd {self.system.value}"
        return text + (f" (failed: {', '.join(self.failed_units)})" if self.failed_units else "")


@dataclass
class RebootResult:
    node: str
    init: NodeInit
    shutdown_s: float
    boot_s: float
    exit_code: int | None     # the old PID 1's exit code (137 = it had to be killed)
    readiness: Readiness

    def describe(self) -> str:
        how = ("killed after the stop timeout" if self.exit_code == 137
               else f"orderly shutdown, exit {self.exit_code}")
        return (f"{self.node}: rebooted ({how}) - down in {self.shutdown_s:.1f}s, ready again in "
                f"{self.boot_s:.1f}s; {self.readiness.summary()}")


def node_init(container) -> NodeInit:
    return NodeInit.parse(container.labels.get(INIT_LABEL, NodeInit.DOCKER_INIT.value))


def ssh_banner(ip: str, port: int = 22, timeout: float = 2.0) -> str:
    """Connect and read the server's SSH identification line (raise NotReady if there is none)."""
    try:
        with socket.create_connection((ip, port), timeout=timeout) as s:
            line = s.recv(256)
    except OSError as exc:
        raise NotReady(f"ssh {ip}:{port}: {exc}") from exc
    if not line.startswith(b"SSH-"):
        raise NotReady(f"ssh {ip}:{port}: no SSH banner ({line[:40]!r})")
    return line.decode(errors="replace").strip()


def _out(container, argv: list[str]) -> tuple[int, str]:
    code, out, err = node_exec.exec_whole(container, argv)
    return code, (out + err).decode(errors="replace").strip()


def system_state(container) -> SystemState:
    _, text = _out(container, ["systemctl", "is-system-running"])  # exits non-zero unless running
    try:
        return SystemState(text.splitlines()[-1] if text else "unknown")
    except ValueError:
        return SystemState.UNKNOWN


def failed_units(container) -> list[str]:
    _, text = _out(container, ["systemctl", "list-units", "--state=failed", "--plain", "--no-legend",
                               "--no-pager"])
    return [line.split()[0] for line in text.splitlines() if line.split()]


def wait_ready(client, n: NodeInfo, timeout: float = 120.0) -> Readiness:
    """Poll until the node is ready (see the module doc); fail at once, with the node's logs, if the
    container stops; fail after `timeout` seconds naming what was still missing."""
    c = client.containers.get(n.container)
    init = node_init(c)
    ready = Readiness(init)
    try:
        for attempt in Retrying(stop=stop_after_delay(timeout), reraise=True,
                                wait=wait_exponential(multiplier=0.05, max=1.0),
                                retry=retry_if_exception_type(NotReady)):
            with attempt:
                c.reload()
                if c.status != "running":
                    raise SimError(f"node {n.container} is {c.status} "
                                   f"(exit {c.attrs['State'].get('ExitCode')}):\n{node_logs(c)}")
                if init is NodeInit.SYSTEMD:
                    ready.system = system_state(c)
                    if ready.system not in READY_STATES:
                        raise NotReady(f"systemctl is-system-running: {ready.system.value}")
                ssh_banner(n.ip)
                code, out = _out(c, ["docker", "info", "--format", "{{.ServerVersion}}"])
                if code != 0:
                    raise NotReady(f"inner docker info: {out}")
    except NotReady as exc:
        raise SimError(f"node {n.container} not ready after {timeout:.0f}s: {exc}\n{node_logs(c)}") from exc
    if ready.system is SystemState.DEGRADED:
        ready.failed_units = failed_units(c)
    return ready


def reboot(client, n: NodeInfo, ready_timeout: float = 120.0,
           stop_timeout: float = STOP_TIMEOUT_S) -> RebootResult:
    """Stop the node container with its STOPSIGNAL, start it again, wait until it is ready; its SSH host
    key must be the same afterwards (the cluster's known_hosts stays valid)."""
    c = client.containers.get(n.container)
    init = node_init(c)
    key_before = provision.read_host_key(c)
    t0 = time.monotonic()
    c.stop(timeout=int(stop_timeout))
    t1 = time.monotonic()
    c.reload()
    exit_code = c.attrs["State"].get("ExitCode")
    try:
        c.start()
    except docker.errors.APIError as exc:
        raise SimError(f"{n.name}: the node container did not start again after the reboot: {exc}") from exc
    ready = wait_ready(client, n, ready_timeout)
    t2 = time.monotonic()
    key_after = provision.read_host_key(c)
    if key_after != key_before:
        raise SimError(f"{n.name}: SSH host key changed across the reboot ({key_before[:40]}... -> "
                       f"{key_after[:40]}...); known_hosts no longer matches")
    return RebootResult(n.name, init, round(t1 - t0, 2), round(t2 - t1, 2), exit_code, ready)


def node_logs(c, lines: int = 30) -> str:
    """The node container's output plus the tails of its dockerd and sshd logs (best effort): files under
    docker-init, the journal and the failed units under systemd."""
    parts = []
    try:
        parts.append(c.logs(tail=lines).decode(errors="replace"))
    except docker.errors.APIError:
        pass
    if node_init(c) is NodeInit.SYSTEMD:
        argvs = [["journalctl", "-b", "--no-pager", "-n", str(lines), "-u", "docker", "-u", "containerd",
                  "-u", "ssh", "-u", "sim-boot", "-u", "sim-memory"],
                 ["systemctl", "list-units", "--state=failed", "--no-pager"]]
    else:
        argvs = [["tail", "-n", str(lines), "/var/log/dockerd.log", "/var/log/sshd.log", "/var/log/sim-memory.log"]]
    for argv in argvs:
        try:
            code, extra = c.exec_run(argv)
            if code in (0, 1):
                parts.append(extra.decode(errors="replace"))
        except docker.errors.APIError:
            pass  # the container is not running
    return "".join(parts)
