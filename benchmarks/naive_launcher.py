"""The baseline `bench_up.py` compares against: a naive launcher modelled on community scripts.

One `ssh` process per command (the OpenSSH client, a new TCP + key exchange every time, host keys
checked against the sim's known_hosts), run strictly one after another:

    ssh head docker run ...              # head
    until ssh head ss ... | grep; do sleep 2; done
    ssh peer docker run ...              # each peer, in turn
    until curl -sf http://head:port/health; do sleep 2; done
    curl ... /v1/completions             # one completion

With `watch=True` every 2 s poll also asks each started container's state (`docker inspect`), the
most a careful hand-written script does to notice a crash; the plain version never notices one.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import time
from dataclasses import dataclass, field

POLL = 2.0


class NaiveFailed(Exception):
    def __init__(self, node: str, container: str, detected: float, message: str):
        self.node, self.container, self.detected = node, container, detected
        super().__init__(message)


@dataclass
class NaiveResult:
    seconds: float
    polls: dict = field(default_factory=dict)
    text: str = ""


class NaiveLauncher:
    def __init__(self, key: str, known_hosts: str, user: str = "root", interval: float = POLL):
        self.key, self.known_hosts, self.user, self.interval = key, known_hosts, user, interval

    def ssh_argv(self, host: str, command: str) -> list[str]:
        return ["ssh", "-F", "/dev/null", "-i", self.key, "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes", "-o", "IdentitiesOnly=yes",
                f"{self.user}@{host}", command]

    def ssh(self, host: str, argv: list[str] | tuple[str, ...], check: bool = True) -> subprocess.CompletedProcess:
        proc = subprocess.run(self.ssh_argv(host, shlex.join(argv)), capture_output=True, text=True, timeout=120,
                              check=False)
        if check and proc.returncode != 0:
            raise RuntimeError(f"ssh {host} {shlex.join(argv)[:80]}: exit {proc.returncode}: {proc.stderr.strip()[-300:]}")
        return proc

    def _alive(self, started: list[tuple[str, str, str]]) -> None:
        """Raise NaiveFailed for the first started container that is no longer running."""
        for node, host, container in started:
            proc = self.ssh(host, ["docker", "inspect", "-f", "{{.State.Status}}", container], check=False)
            status = proc.stdout.strip()
            if status != "running":
                raise NaiveFailed(node, container, time.time(), f"{node}: {container} is {status or 'gone'}")

    def _poll(self, ready, started: list, watch: bool, timeout: float, what: str) -> int:
        deadline = time.monotonic() + timeout
        polls = 0
        while True:
            if watch:
                self._alive(started)
            polls += 1
            if ready():
                return polls
            if time.monotonic() > deadline:
                raise TimeoutError(f"naive launcher: {what} not reached after {timeout:.0f} s")
            time.sleep(self.interval)

    def up(self, plan, head_host: str, port: int, master_port: int, model: str, *, watch: bool = False,
           timeout: float = 120.0) -> NaiveResult:
        """Deploy the rendered plan (head first); returns the wall time up to the first completion."""
        t0 = time.monotonic()
        head, peers = plan[0], plan[1:]
        started: list[tuple[str, str, str]] = []
        polls = {}
        self.ssh(head.node.address, head.argv)
        started.append((head.node.name, head.node.address, head.container))
        if peers:
            def listening() -> bool:
                out = self.ssh(head_host, ["ss", "-Hltn", f"sport = :{master_port}"], check=False).stdout
                return bool(out.strip())
            polls["listen"] = self._poll(listening, started, watch, timeout, f"port {master_port} LISTEN")
            for peer in peers:
                self.ssh(peer.node.address, peer.argv)
                started.append((peer.node.name, peer.node.address, peer.container))
        url = f"http://{head_host}:{port}"

        def healthy() -> bool:
            return subprocess.run(["curl", "-sf", "-m", "2", "-o", "/dev/null", f"{url}/health"], check=False).returncode == 0
        polls["health"] = self._poll(healthy, started, watch, timeout, "/health")
        body = json.dumps({"model": model, "prompt": "The DGX Spark cluster is", "max_tokens": 8, "temperature": 0})
        proc = subprocess.run(["curl", "-sf", "-m", "30", "-H", "Content-Type: application/json", "-d", body,
                               f"{url}/v1/completions"], capture_output=True, text=True, check=False)
        if proc.returncode != 0:
            raise RuntimeError(f"naive launcher: completion failed (curl exit {proc.returncode})")
        text = json.loads(proc.stdout)["choices"][0]["text"]
        return NaiveResult(time.monotonic() - t0, polls, text)
