"""Containers of this tool on one node: find, inspect, remove, read logs (Docker CLI over SSH)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..render.launch import LABEL_MANAGED
from ..transport.node import NodeConnection


@dataclass(frozen=True)
class ContainerState:
    name: str
    status: str  # created | running | exited | dead | ...
    exit_code: int
    oom_killed: bool
    started_at: str
    image: str
    labels: dict

    @property
    def running(self) -> bool:
        return self.status == "running"


def inspect_container(conn: NodeConnection, name: str) -> ContainerState | None:
    """Similar to `docker container inspect NAME`; None when there is no such container."""
    result = conn.run(["docker", "container", "inspect", "--format", "{{json .}}", name], timeout=30)
    if not result.ok:
        if "No such" in result.stderr:
            return None
        result.check()
    data = json.loads(result.stdout)
    state = data["State"]
    return ContainerState(
        name=data["Name"].lstrip("/"), status=state["Status"], exit_code=state.get("ExitCode", 0),
        oom_killed=state.get("OOMKilled", False), started_at=state.get("StartedAt", ""),
        image=data["Image"], labels=(data.get("Config") or {}).get("Labels") or {},
    )


def managed_containers(conn: NodeConnection, recipe: str | None = None) -> list[str]:
    """Names of this tool's containers on the node (all recipes, or one)."""
    argv = ["docker", "ps", "--all", "--format", "{{.Names}}", "--filter", f"label={LABEL_MANAGED}=true"]
    if recipe:
        argv += ["--filter", f"label=spark-deploy.recipe={recipe}"]
    result = conn.run(argv, timeout=30, check=True)
    return [line for line in result.stdout.splitlines() if line]


def remove_container(conn: NodeConnection, name: str, stop_timeout: int = 10) -> bool:
    """Stop (SIGTERM, then SIGKILL after stop_timeout) and remove; True when something was removed."""
    result = conn.run_script('docker stop --time "$2" "$1" >/dev/null 2>&1; docker rm --force "$1"',
                             name, str(stop_timeout), timeout=stop_timeout + 60)
    return result.ok


def tail_logs(conn: NodeConnection, name: str, lines: int = 30) -> list[str]:
    result = conn.run_script('docker logs --tail "$1" "$2" 2>&1', str(lines), name, timeout=30)
    return result.stdout.splitlines()[-lines:]
