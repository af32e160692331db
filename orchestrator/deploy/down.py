"""`down`: remove this tool's containers on every node it can reach — peers first, then the head.

A node that cannot be reached, or a removal that fails, does not stop the others; the result names
exactly what is left and where, and the command exits 1.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial

from ..config.inventory import Inventory
from ..docker_cli.containers import Container, remove_container
from ..operation import AuditAction, Locking, Operation, Outcome, Reach
from ..releases import store
from ..releases.record import Release, ReleaseOutcome
from ..render.spec import secrets_dir
from ..runner.events import Events, Kind
from ..transport.cancel import interrupt_reason
from ..transport.group import Cluster, Connector, GroupError
from ..transport.node import NodeConnection


@dataclass
class DownResult:
    removed: list[tuple[str, Container]] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # node -> what could not be removed, and why
    unreachable: dict[str, str] = field(default_factory=dict)
    found: dict[str, list[Container]] = field(default_factory=dict)  # what there was to remove, per node
    interrupted: str = ""  # "interrupted (Ctrl-C)": the removal stopped partway
    # release id -> nodes where its kept (stopped) containers were removed: a rollback to it re-creates them
    recreate: dict[int, list[str]] = field(default_factory=dict)

    @property
    def ok(self) -> bool:
        return not self.failed and not self.unreachable and not self.interrupted

    def not_removed(self) -> dict[str, list[Container]]:
        """Per node, what was found and not (yet) removed: after an interruption, what may still be there."""
        gone = {(node, c.id) for node, c in self.removed}
        left = {n: [c for c in cs if (n, c.id) not in gone] for n, cs in self.found.items()}
        return {n: cs for n, cs in left.items() if cs}


class DownRefused(Exception):
    """`down` without a recipe would stop several recipes and the caller did not approve: nothing was removed."""

    def __init__(self, recipes: list[str]):
        self.recipes = recipes
        super().__init__(f"`down` without a recipe would stop {len(recipes)} running recipes ({', '.join(recipes)}); "
                         "nothing was removed")


def recipes_running(found: dict[str, list[Container]]) -> list[str]:
    """The distinct recipes that serve among the containers found: what `down` would stop (kept, stopped
    containers of earlier releases are removed without asking, as they stop nothing)."""
    return sorted({c.ours.recipe if c.ours else c.name for cs in found.values() for c in cs if c.running})


def rollback_recreates(removed: list[tuple[str, Container]], releases: list[Release]) -> dict[int, list[str]]:
    """Release id -> the nodes where `down` removed its kept (stopped) containers: `rollback` to it can no longer
    start them as they were, it must re-create them from the recorded argv (the image and model stay)."""
    by_run = {}
    for release in sorted(releases, key=lambda r: r.id):  # a rollback that restarted kept ones shares their run
        by_run[release.container_run] = release.id
    out: dict[int, list[str]] = {}
    for node, container in removed:
        labels = container.ours
        if container.running or labels is None or labels.run not in by_run:
            continue
        nodes = out.setdefault(by_run[labels.run], [])
        if node not in nodes:
            nodes.append(node)
    return dict(sorted(out.items()))


def recreate_note(recreate: dict[int, list[str]]) -> str:
    """What `down` says about the kept containers it removed ("" when none)."""
    if not recreate:
        return ""
    which = "; ".join(f"release {rid} (on {', '.join(nodes)})" for rid, nodes in recreate.items())
    first = next(iter(recreate))
    return (f"removed the kept containers of {which}: `spark-deploy rollback {first}` and the like will re-create "
            "them from the recorded release (docker run again) instead of starting them")


def teardown_order(nodes: list[str], head: str) -> list[list[str]]:
    """Peers (together) before the head, so no rank is left waiting on a dead head."""
    peers = [n for n in nodes if n != head]
    return [group for group in (peers, [n for n in nodes if n == head]) if group]


def stale_secret_files(inventory: Inventory, recipe: str | None) -> dict[str, tuple[str, str]]:
    """Per node, the env-file(s) a killed `up` may have left: (secrets dir, recipe name or the glob `*`)."""
    return {n.name: (secrets_dir(n), recipe or "*") for n in inventory.nodes}


# "$1" the secrets dir, "$2" a recipe name or `*`: its env-file(s) removed, none there is fine
_FORGET = 'for f in "$1"/$2.env; do [ -e "$f" ] && rm -f -- "$f"; done; true'


def forget_stale_secrets(conn: NodeConnection, where: tuple[str, str]) -> None:
    """Recipe names are validated (no glob or shell characters), so only `*` ever globs here."""
    conn.run_script(_FORGET, *where, timeout=30, check=True)


def down(inventory: Inventory, recipe: str | None, events: Events, *, connector: Connector | None = None,
         approve: Callable[[list[str]], bool] | None = None) -> DownResult:
    """Under the deploy lock when the head answers; without it (said loudly) when only peers do — a peer
    left running alone holds memory for nothing, so what can be reached is removed either way.
    Without a recipe, when more than one recipe runs, `approve(recipes)` must say yes (else DownRefused)."""
    result = DownResult()
    try:
        with Operation(inventory, events, AuditAction.DOWN, reach=Reach.ANY, lock=Locking.IF_HEAD_ANSWERS,
                       cluster_factory=partial(Cluster, connector=connector)) as op:
            result.unreachable = dict(op.unreachable)
            _down_locked(op, recipe, events, result, approve)
    except KeyboardInterrupt as exc:  # the operation audited it and let the lock go; say what may be left
        result.interrupted = interrupt_reason(exc)
        for node, left in result.not_removed().items():
            result.failed.setdefault(node, f"{result.interrupted} before it removed "
                                           f"{', '.join(f'{c.name} ({c.id[:12]})' for c in left)}: it may still be "
                                           "there (`spark-deploy status` shows it; `spark-deploy down` again removes it)")
        if not result.failed:
            result.failed[inventory.cluster] = f"{result.interrupted} before it had read what runs: nothing was removed"
    for node, why in result.unreachable.items():
        result.failed.setdefault(node, f"unreachable, its containers (if any) were not removed: {why}")
    return result


def _down_locked(op: Operation, recipe: str | None, events: Events, result: DownResult,
                 approve: Callable[[list[str]], bool] | None) -> None:
    inventory, cluster, state = op.inventory, op.cluster, op.state
    found = {n: [c for c in cs if recipe is None or (c.ours and c.ours.recipe == recipe)]
             for n, cs in state.containers.items()}
    several = recipes_running(found)
    if recipe is None and len(several) > 1 and approve is not None and not approve(several):
        op.done(Outcome.REFUSED, f"would stop {len(several)} recipes ({', '.join(several)}); not approved")
        raise DownRefused(several)
    result.unreachable.update({n: why for n, why in state.unread.items() if n not in found})
    result.found = {n: list(cs) for n, cs in found.items() if cs}
    alive = [c for c in op.alive if c.name in found]
    files = stale_secret_files(inventory, recipe)
    for group in teardown_order([c.name for c in alive], inventory.head):
        targets = [cluster[n] for n in group if found.get(n)]
        try:
            cluster.each(lambda conn: _remove_all(conn, found[conn.name], result, events), targets)
        except GroupError as exc:
            for node, error in exc.failures.items():
                result.failed.setdefault(node, str(error))
    try:
        cluster.each(lambda conn: forget_stale_secrets(conn, files[conn.name]), alive)
    except GroupError as exc:
        for node, error in exc.failures.items():
            events.warn(f"could not remove a stale secrets env-file in {files[node][0]}: {error}", node)
    result.recreate = rollback_recreates(result.removed, op.state.history.releases)
    _record_stopped(op, recipe, found, result)


def _record_stopped(op: Operation, recipe: str | None, found: dict, result: DownResult) -> None:
    """The release that served is now "stopped" in the history; the operation's audit line either way."""
    stopped = op.state.serving if op.state.serving_known else None
    if stopped is not None and recipe is not None and stopped.recipe != recipe:
        stopped = None  # another recipe serves: this `down` did not touch it
    unknown = "" if op.state.serving_known else "; which release served is unknown (a node was not read): none is " \
                                                "recorded as stopped"
    if stopped is not None and result.ok:
        try:
            store.write_release(op.cluster, op.inventory, stopped.touch(outcome=ReleaseOutcome.STOPPED),
                                [c for c in op.alive if c.name in found])
        except Exception as exc:  # noqa: BLE001 - the containers are gone either way; the record is named
            op.events.warn(f"could not record the stopped release: {exc}")
    op.done(Outcome.OK if result.ok else Outcome.INCOMPLETE, f"removed {len(result.removed)} container(s){unknown}",
            release=stopped.id if stopped else None, nodes=dict(result.failed))


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
