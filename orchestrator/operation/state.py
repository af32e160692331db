"""ONE typed reading of a cluster — what every command, mutating or not, decides from.

One round trip per node: a single script prints this tool's containers (inspected), the node's copy of
the release history, its copy of the maintenance baseline and, on the head, the deploy lock, each section
under a marker carrying a fresh nonce (no file content can forge one). Each section goes to the parser
its owner already has (docker_cli.containers, releases.store, window.store, releases.lock), so the
rules stay where they are tested; this module only gathers and judges "which release serves" — in one
place, with one policy: a release serves when its plan runs on every rank of its world, as seen on the
nodes that answered. A node that did not answer makes the answer unknown (`serving_known` is False), never
a guess.
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field

from ..config.inventory import Inventory
from ..docker_cli.containers import Container, parse_inspect
from ..window import store as window_store
from ..window.baseline import Baseline, WindowState
from ..releases import store as release_store
from ..releases.keys import cluster_key
from ..releases.lock import LockDetails, lock_path
from ..releases.record import Release
from ..releases.serving import kept_releases, running_of, serving_release
from ..render.labels import MANAGED_FILTER
from ..transport.group import Cluster, GroupError
from ..transport.node import NodeConnection

# "$1" nonce, "$2" docker ps filter, "$3" releases dir, "$4" baseline file, "$5" lock file ("" off the head).
# Every section is printed whatever the others did: one failing read never hides the rest; every file is
# followed by a newline (the lock file has none), so a marker always starts its own line.
_READ = r'''set -u
m="@@spark-deploy-state-$1"
echo "$m containers"
if ids=$(docker ps --all --quiet --no-trunc --filter "$2" 2>&1); then
  if [ -n "$ids" ]; then docker container inspect $ids 2>&1 || { echo; echo "$m containers-error"; }; echo
  else echo "[]"; fi
else echo "$m containers-error"; printf '%s\n' "$ids"; fi
echo "$m releases"
if [ ! -d "$3" ]; then echo MISSING; else echo DIR; for f in "$3"/*.json; do [ -e "$f" ] && cat -- "$f" && echo; done; fi
echo "$m window"
if [ -f "$4" ]; then cat -- "$4"; echo; else echo MISSING; fi
echo "$m lock"
if [ -n "$5" ] && [ -f "$5" ]; then cat -- "$5"; echo; fi
echo "$m end"'''

SECTIONS = ("containers", "releases", "window", "lock", "end")


@dataclass
class NodeReading:
    """What one node said, each part parsed by its owner's parser; `errors` names a part not read."""

    node: str
    containers: list[Container] | None = None
    releases: release_store.NodeCopy | None = None
    window: Baseline | None | Exception = None
    lock: LockDetails | str | None = None  # details, or the raw text when unparseable
    errors: dict[str, str] = field(default_factory=dict)


def split_sections(stdout: str, nonce: str) -> dict[str, str]:
    """Pure: the script's output -> {section: its text}; a section whose error marker was printed
    comes back as `NAME-error`."""
    marker = f"@@spark-deploy-state-{nonce} "
    sections: dict[str, list[str]] = {}
    current: str | None = None
    for line in stdout.splitlines():
        if line.startswith(marker):
            current = line[len(marker):].strip()
            sections.setdefault(current, [])
            continue
        if current is not None:
            sections[current].append(line)
    return {name: "\n".join(lines) for name, lines in sections.items()}


def parse_reading(node: str, stdout: str, nonce: str) -> NodeReading:
    """Pure: one node's output -> its NodeReading (each part through the parser that owns it)."""
    parts = split_sections(stdout, nonce)
    reading = NodeReading(node)
    if "end" not in parts:
        reading.errors["state"] = "the state read ended early: " + (stdout.strip().splitlines() or ["no output"])[-1]
    if "containers-error" in parts:
        reading.errors["containers"] = (parts["containers-error"].strip() or parts.get("containers", "").strip()
                                        or "docker did not answer")
    elif "containers" in parts:
        try:
            reading.containers = parse_inspect(parts["containers"])
        except ValueError as exc:
            reading.errors["containers"] = f"docker inspect printed something unreadable: {exc}"
    if "releases" in parts:
        reading.releases = release_store.parse_copy(node, parts["releases"])
    if "window" in parts:
        try:
            reading.window = window_store.parse_copy(parts["window"])
        except ValueError as exc:
            reading.window = exc
    if parts.get("lock", "").strip():
        text = parts["lock"].strip()
        reading.lock = LockDetails.parse(text) or text
    return reading


def read_node(conn: NodeConnection, inventory: Inventory) -> NodeReading:
    nonce = secrets.token_hex(6)
    lock_file = lock_path(inventory) if conn.name == inventory.head else ""
    result = conn.run_script(_READ, nonce, MANAGED_FILTER, release_store.releases_dir(inventory, conn.name),
                             window_store.baseline_path(inventory, conn.name), lock_file, timeout=60)
    reading = parse_reading(conn.name, result.stdout, nonce)
    if not result.ok and not reading.errors:
        reading.errors["state"] = result.stderr.strip() or f"exit {result.exit_code}"
    return reading


@dataclass
class ClusterState:
    """Containers by node, the reconciled history, the open window and the lock, as read at one moment."""

    inventory: Inventory
    containers: dict[str, list[Container]]  # node -> this tool's containers (every recipe, any state)
    history: release_store.History
    window_found: window_store.Found
    lock: LockDetails | str | None  # as read on the head (before this command took it, if it does)
    unreachable: dict[str, str] = field(default_factory=dict)  # node -> why it was not read at all
    unread: dict[str, str] = field(default_factory=dict)  # node -> which part could not be read, and why

    @property
    def releases(self) -> list[Release]:
        return self.history.releases

    @property
    def serving_known(self) -> bool:
        """Every node's containers were read: only then can "nothing serves" be said."""
        return all(node.name in self.containers for node in self.inventory.ranked)

    @property
    def serving(self) -> Release | None:
        """THE answer to "which release serves?" (releases/serving.py holds the rule)."""
        return serving_release(self.releases, self.containers, cluster_key(self.inventory))

    @property
    def window(self) -> Baseline | None:
        """The open maintenance window's baseline, if one is open."""
        found = self.window_found.baseline
        return found if found is not None and found.state is WindowState.OPEN else None

    def kept(self, keep: int) -> list[Release]:
        """The serving release plus the `keep` newest releases that served, newest first."""
        return kept_releases(self.releases, self.serving, keep)

    def running(self, release: Release) -> dict[str, list[Container]]:
        """Per node, the running containers of the release's plan."""
        return running_of(release, self.containers)

    def problems(self) -> list[str]:
        """Every node that was not (fully) read, and every history copy that disagrees, in words."""
        said = [f"{n}: unreachable: {why}" for n, why in self.unreachable.items()]
        said += [f"{n}: {why}" for n, why in self.unread.items()]
        said += [f"{n}'s copy of the history: {'; '.join(notes)}" for n, notes in self.history.disagreements.items()
                 if n not in self.unreachable]
        return said


def combine(inventory: Inventory, readings: dict[str, NodeReading], unreachable: dict[str, str]) -> ClusterState:
    """Pure: per-node readings -> one ClusterState (history reconciled, the newest window copy)."""
    containers: dict[str, list[Container]] = {}
    copies: list[release_store.NodeCopy] = []
    windows: dict[str, Baseline | None | Exception] = {}
    unread: dict[str, str] = {}
    lock: LockDetails | str | None = None
    for node in [n.name for n in inventory.ranked]:
        if node in unreachable:
            copies.append(release_store.NodeCopy(node, error=f"unreachable: {unreachable[node]}"))
            windows[node] = RuntimeError(f"unreachable: {unreachable[node]}")
            continue
        reading = readings[node]
        if reading.errors:
            unread[node] = "; ".join(f"{part} not read: {why}" for part, why in reading.errors.items())
        if reading.containers is not None:
            containers[node] = reading.containers
        copies.append(reading.releases or release_store.NodeCopy(node, error="its release records were not read"))
        windows[node] = reading.window
        if node == inventory.head:
            lock = reading.lock
    return ClusterState(inventory, containers, release_store.reconcile(copies), window_store.newest(windows), lock,
                        dict(unreachable), unread)


def read_state(cluster: Cluster, conns: list[NodeConnection] | None = None,
               unreachable: dict[str, str] | None = None) -> ClusterState:
    """Read every given (open) connection in one round trip each; a node that fails now joins `unreachable`."""
    inventory = cluster.inventory
    conns = [c for c in cluster.nodes if c.is_open] if conns is None else conns
    missing = dict(unreachable or {})
    for node in inventory.ranked:
        if node.name not in {c.name for c in conns}:
            missing.setdefault(node.name, "not connected")
    try:
        readings = cluster.each(lambda conn: read_node(conn, inventory), conns)
    except GroupError as exc:
        readings = dict(exc.results)
        missing.update({n: str(e) for n, e in exc.failures.items()})
    return combine(inventory, readings, missing)
