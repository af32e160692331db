"""`down`: remove this tool's containers on every node it can reach — peers first, then the head.

A node that cannot be reached, or a removal that fails, does not stop the others; the result names
exactly what is left and where, and the command exits 1.
"""

from __future__ import annotations

from contextlib import ExitStack
from dataclasses import dataclass, field

from ..config.inventory import Inventory
from ..docker_cli.containers import Container, ours, remove_container
from ..releases import audit, store
from ..releases.guard import holding_lock
from ..releases.record import ReleaseOutcome
from ..releases.serving import serving_release
from ..render.spec import secrets_dir
from ..runner.events import Events, Kind
from ..transport.group import Cluster, GroupError
from ..transport.node import NodeConnection


@dataclass
class DownResult:
    removed: list[tuple[str, Container]] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # node -> what could not be removed, and why
    unreachable: dict[str, str] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.unreachable


def teardown_order(nodes: list[str], head: str) -> list[list[str]]:
    """Peers (together) before the head, so no rank is left waiting on a dead head."""
    peers = [n for n in nodes if n != head]
    return [group for group in (peers, [n for n in nodes if n == head]) if group]


def stale_secret_files(inventory: Inventory, recipe: str | None) -> dict[str, tuple[str, str]]:
    """Per node, the env-file(s) a killed `up` may have left: (secrets dir, recipe name or the glob `*`)."""
    return {n.name: (secrets_dir(n), recipe or "*") for n in inventory.nodes}


def forget_stale_secrets(conn: NodeConnection, where: tuple[str, str]) -> None:
    """Recipe names are validated (no glob or shell characters), so only `*` ever globs here."""
    conn.run_script('for f in "$1"/$2.env; do [ -e "$f" ] && rm -f -- "$f"; done; true', *where,
                    timeout=30, check=True)


def down(inventory: Inventory, recipe: str | None, events: Events) -> DownResult:
    result = DownResult()
    cluster = Cluster(inventory)
    try:
        alive, failures = cluster.open_reachable()
        result.unreachable = {node: str(exc) for node, exc in failures.items()}
        with ExitStack() as held:
            if any(c.name == inventory.head for c in alive):
                held.enter_context(holding_lock(cluster, inventory, events))
            else:
                events.warn(f"the head {inventory.head} is unreachable: removing what can be reached without the "
                            "deploy lock")
            _down_locked(cluster, inventory, recipe, events, alive, result)
    finally:
        cluster.close()
    for node, why in result.unreachable.items():
        result.failed.setdefault(node, f"unreachable, its containers (if any) were not removed: {why}")
    return result


def _down_locked(cluster: Cluster, inventory: Inventory, recipe: str | None, events: Events,
                 alive: list[NodeConnection], result: DownResult) -> None:
    try:
        found = cluster.each(lambda c: ours(c, recipe), alive)
    except GroupError as exc:
        found = dict(exc.results)
        result.unreachable.update({n: str(e) for n, e in exc.failures.items()})
    files = stale_secret_files(inventory, recipe)
    for group in teardown_order([c.name for c in alive if c.name in found], inventory.head):
        targets = [cluster[n] for n in group if found.get(n)]
        try:
            cluster.each(lambda conn: _remove_all(conn, found[conn.name], result, events), targets)
        except GroupError as exc:
            for node, error in exc.failures.items():
                result.failed.setdefault(node, str(error))
    try:
        cluster.each(lambda conn: forget_stale_secrets(conn, files[conn.name]),
                     [c for c in alive if c.name in found])
    except GroupError as exc:
        for node, error in exc.failures.items():
            events.warn(f"could not remove a stale secrets env-file in {files[node][0]}: {error}", node)
    _record_stopped(cluster, inventory, events, alive, found, result)


def _record_stopped(cluster: Cluster, inventory: Inventory, events: Events, alive: list[NodeConnection],
                    found: dict, result: DownResult) -> None:
    """The release that served is now "stopped" in the history; one audit line either way."""
    stopped = None
    try:
        history = store.read_history(cluster, inventory, alive)
        stopped = serving_release(history.releases, found, inventory.cluster)
        if stopped is not None and result.ok:
            store.write_release(cluster, inventory, stopped.touch(outcome=ReleaseOutcome.STOPPED), alive)
    except Exception as exc:  # noqa: BLE001 - the containers are gone either way; the record is named
        events.warn(f"could not record the stopped release: {exc}")
    audit.append(cluster, inventory, audit.entry(
        "down", "ok" if result.ok else "incomplete", release=stopped.id if stopped else None,
        detail=f"removed {len(result.removed)} container(s)" + ("" if result.ok else f"; left: {result.failed}")),
        alive)


def _remove_all(conn: NodeConnection, containers: list[Container], result: DownResult, events: Events) -> None:
    errors = []
    for container in containers:
        try:
            remove_container(conn, container.id)
        except Exception as exc:  # noqa: BLE001 - try every container, then report each failure
            errors.append(f"{container.name} ({container.id[:12]}) is still there: {exc}")
            continue
        result.removed.append((conn.name, container))
        events.container(Kind.CONTAINER_REMOVED, conn.name, container.name, container.id)
    if errors:
        raise RuntimeError("; ".join(errors))
