"""Containers on one node through the Docker CLI over SSH: find by label, inspect, run, stop, start, remove.

Containers are addressed by ID once known; names are only what `docker run --name` asks for. Each result
keeps the raw `docker container inspect` data (docker-py's lesson), parsed by pure functions.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..render.labels import MANAGED_FILTER, ContainerLabels, Label
from ..transport.node import NodeConnection, NodeError


@dataclass(frozen=True)
class Container:
    """Similar to one element of `docker container inspect`; `raw` holds all of it."""

    id: str
    name: str
    status: str  # created | running | restarting | exited | dead | paused
    exit_code: int
    oom_killed: bool
    started_at: str
    image: str
    labels: dict
    raw: dict = field(default_factory=dict, repr=False, compare=False)

    @property
    def running(self) -> bool:
        return self.status in ("running", "restarting")

    @property
    def ours(self) -> ContainerLabels | None:
        return ContainerLabels.parse(self.labels)

    @property
    def kept(self) -> bool:
        """A previous deployment's container, stopped and renamed by `up` (`sd-RECIPE-rN-RUN`)."""
        labels = self.ours
        return labels is not None and self.name != f"sd-{labels.recipe}-r{labels.rank}"

    @property
    def args(self) -> list[str]:
        return list(self.raw.get("Args") or [])




def parse_inspect(stdout: str) -> list[Container]:
    """`docker container inspect` output (a JSON array) -> containers."""
    text = stdout.strip()
    if not text:
        return []
    return [container_of(data) for data in json.loads(text)]


def container_of(data: dict) -> Container:
    state = data.get("State") or {}
    return Container(
        id=data["Id"], name=data.get("Name", "").lstrip("/"), status=state.get("Status", "unknown"),
        exit_code=state.get("ExitCode", 0), oom_killed=bool(state.get("OOMKilled", False)),
        started_at=state.get("StartedAt", ""), image=data.get("Image", ""),
        labels=(data.get("Config") or {}).get("Labels") or {}, raw=data)


def inspect_container(conn: NodeConnection, ref: str) -> Container | None:
    """Similar to `docker container inspect REF` (ID or name); None when there is no such container."""
    result = conn.run(["docker", "container", "inspect", ref], timeout=30)
    if not result.ok:
        if "No such" in result.stderr or "no such" in result.stderr:
            return None
        result.check()
    found = parse_inspect(result.stdout)
    return found[0] if found else None


_LIST = ('ids=$(docker ps --all --quiet --no-trunc "$@") || exit 1; '
         'if [ -n "$ids" ]; then docker container inspect $ids; else echo "[]"; fi')


def list_containers(conn: NodeConnection, filters: list[str]) -> list[Container]:
    """Every container matching all `filters` (`docker ps --filter` syntax), inspected, in one round trip."""
    argv = [arg for f in filters for arg in ("--filter", f)]
    result = conn.run_script(_LIST, *argv, timeout=30, check=True)
    return parse_inspect(result.stdout)


def ours(conn: NodeConnection, recipe: str | None = None) -> list[Container]:
    """This tool's containers on the node (all recipes, or one), running or not."""
    filters = [MANAGED_FILTER] + ([f"label={Label.RECIPE}={recipe}"] if recipe else [])
    return list_containers(conn, filters)


def named(conn: NodeConnection, names: list[str]) -> list[Container]:
    """Containers with exactly these names, whoever made them (repeated name filters are OR'ed by docker and
    match as regular expressions: the result is re-checked for exact names)."""
    if not names:
        return []
    return [c for c in list_containers(conn, [f"name=^/{name}$" for name in names]) if c.name in names]


def run_container(conn: NodeConnection, argv: tuple[str, ...] | list[str]) -> str:
    """`docker run --detach ...`; returns the new container's ID (what `--detach` prints)."""
    result = conn.run(list(argv), timeout=120)
    if not result.ok:
        raise NodeError(conn.name, f"docker run failed: {result.stderr.strip() or result.stdout.strip()}")
    return result.stdout.strip().splitlines()[-1]


def stop_container(conn: NodeConnection, container_id: str, timeout: int = 10) -> None:
    """`docker stop` (SIGTERM, SIGKILL after `timeout`); a container already stopped is fine."""
    conn.run(["docker", "stop", "--time", str(timeout), container_id], timeout=timeout + 60, check=True)


def start_container(conn: NodeConnection, container_id: str) -> None:
    conn.run(["docker", "start", container_id], timeout=60, check=True)


def rename_container(conn: NodeConnection, container_id: str, name: str) -> None:
    conn.run(["docker", "rename", container_id, name], timeout=30, check=True)


# "$1" a container ID, "$2" seconds before SIGKILL
_REMOVE = 'docker stop --time "$2" "$1" >/dev/null 2>&1; docker rm --force "$1"'


def remove_container(conn: NodeConnection, container_id: str, stop_timeout: int = 10) -> None:
    """Stop (SIGTERM, then SIGKILL) and remove. Raises NodeError naming the container when it is still there."""
    result = conn.run_script(_REMOVE, container_id, str(stop_timeout), timeout=stop_timeout + 60)
    if result.ok:
        return
    if "No such container" in result.stderr:
        return  # already gone: what was asked for is true
    raise NodeError(conn.name, f"could not remove container {container_id[:12]}: "
                               f"{result.stderr.strip() or f'docker rm exited {result.exit_code}'}")

