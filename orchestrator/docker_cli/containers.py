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
    def args(self) -> list[str]:
        return list(self.raw.get("Args") or [])

    @property
    def started_key(self) -> tuple[str, str]:
        """Sortable StartedAt (RFC 3339 with its fraction padded: Docker trims trailing zeros), then the run."""
        stamp = self.started_at.rstrip("Z")
        whole, _, fraction = stamp.partition(".")
        return f"{whole}.{fraction[:9]:0<9}", self.ours.run if self.ours else ""


def current_of(containers: list[Container]) -> list[Container]:
    """Pure: per (cluster, recipe, rank) of ours, the container that is the deployment now — the running
    one(s), else the one started last — leaving out the previous releases' containers `up` keeps stopped.
    By labels and start times only: a name (old-style `sd-RECIPE-rN-RUN` included) says nothing here."""
    groups: dict[tuple[str, str, int], list[Container]] = {}
    for c in containers:
        if c.ours is not None:
            groups.setdefault((c.ours.cluster, c.ours.recipe, c.ours.rank), []).append(c)
    out = []
    for group in groups.values():
        running = [c for c in group if c.running]
        out += running or [max(group, key=lambda c: c.started_key)]
    return [c for c in containers if c in out]



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


# "$1" "$2" our recipe's label filters, then the plan's names (either_args): ours by label and whoever holds a
# name, in ONE `docker container inspect` (a name nobody holds is docker's "No such container", not an error).
# Prints the JSON array; any other error of docker's is this script's (exit 1, docker's words on stderr).
RECIPE_OR_NAMED = r'''ids=$(docker ps --all --quiet --no-trunc --filter "$1" --filter "$2") || exit 1; shift 2
[ -n "$ids" ] || [ $# -gt 0 ] || { echo "[]"; exit 0; }
{ err=$(docker container inspect $ids "$@" 2>&1 1>&3 3>&-); rc=$?; } 3>&1
[ "$rc" -eq 0 ] && exit 0
while IFS= read -r line; do
  case $line in ""|*"No such container"*|*"No such object"*) ;; *) printf '%s\n' "$err" >&2; exit 1 ;; esac
done <<< "$err"
exit 0'''


def either_args(recipe: str, names: list[str]) -> list[str]:
    """`RECIPE_OR_NAMED`'s arguments: the two label filters of our recipe, then the names."""
    return [MANAGED_FILTER, f"label={Label.RECIPE}={recipe}", *names]


def of_recipe_or_named(found: list[Container], cluster: str, recipe: str, names: list[str]) -> list[Container]:
    """Pure: of `RECIPE_OR_NAMED`'s containers (one found both ways is listed once), ours of this cluster's
    recipe (one of a spark-deploy too old to set the cluster label counts as this cluster's) and any holding
    exactly one of `names` (whoever made it: a foreign one is a clash)."""
    seen: set[str] = set()
    out = []
    for c in found:
        if c.id in seen:
            continue
        seen.add(c.id)
        if (c.ours is not None and c.ours.cluster in (cluster, "") and c.ours.recipe == recipe) or c.name in names:
            out.append(c)
    return out


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

