"""Starting kept containers again — for the automatic restore after a failed `up`, and for `rollback`.

A kept container is started with `docker start` (never re-created, never renamed: its name carries its
plan), head first, then the peers, and is held to the same waits as a new one: rendezvous, peers joined,
ready, the recipe's log checks, with its log read from its new start only.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..config.inventory import Inventory
from ..config.load import Deployment, bind_recipe_text
from ..config.source import Document
from ..docker_cli.containers import Container, inspect_container, start_container, stop_container
from ..releases.record import Release
from ..render.plan import build_plan
from ..runner.events import Kind, Phase
from ..runner.runner import Runner, StepFailed
from ..transport.group import GroupError
from .context import UpContext
from .liveness import NodeLiveness
from .steps_launch import LogChecks, PeersJoined, Ready, Rendezvous
from .watch import Monitor


@dataclass
class Kept:
    node: str
    container: Container  # as inspected before anything was done to it (found by its labels)

    @property
    def name(self) -> str:
        return self.container.name


class StartKept:
    """`docker start` kept containers, by ID, under the names they always had, and watch their new logs.

    `undo_stops`: for a rollback, undo stops them again, so the release that served before can be
    restored; for a restore there is nothing earlier to go back to, so undo leaves them as they are (and
    says so)."""

    def __init__(self, phase: Phase, kept: list[Kept], undo_stops: bool):
        self.phase, self.kept, self.undo_stops = phase, kept, undo_stops
        self.detail = ", ".join(f"{k.node}: docker start {k.name} ({k.container.id[:12]})" for k in kept)
        self.started: list[Kept] = []

    def run(self, ctx: UpContext) -> None:
        ctx.cluster.each(lambda conn: self._start(ctx, next(k for k in self.kept if k.node == conn.name)),
                         [ctx.conn(k.node) for k in self.kept])

    def _start(self, ctx: UpContext, kept: Kept) -> None:
        conn = ctx.conn(kept.node)
        self.started.append(kept)
        start_container(conn, kept.container.id)
        now = inspect_container(conn, kept.container.id)
        ctx.events.container(Kind.CONTAINER_RESTARTED, kept.node, kept.name, kept.container.id)
        ctx.monitor.watch(conn, kept.container.id, None, kept.name, since=now.started_at if now else None)
        ctx.monitor.helpers.append(NodeLiveness(conn, ctx.monitor).start())

    def undo(self, ctx: UpContext) -> None:
        if not self.undo_stops:
            return
        ctx.monitor.stop([k.container.id for k in self.started])
        for kept in list(self.started):
            stop_container(ctx.conn(kept.node), kept.container.id)
            self.started.remove(kept)

    def leftover(self, ctx: UpContext) -> list[str]:
        return [f"{k.node}: {k.name} ({k.container.id[:12]}) started again" for k in self.started]


def kept_steps(ctx: UpContext, kept: dict[str, Kept], undo_stops: bool) -> list:
    """Head, rendezvous, peers, peers joined — for kept containers — then ready and the log checks."""
    plan = ctx.plan
    head = plan.head.node.name
    steps: list = [StartKept(Phase.HEAD, [kept[head]], undo_stops)]
    peers = [kept[p.node.name] for p in plan.peers]
    if peers:
        steps.append(Rendezvous(head, plan.head.spec.master_port))
        steps.append(StartKept(Phase.PEERS, peers, undo_stops))
        steps.append(PeersJoined([k.node for k in peers], ctx.dep.inventory.node(head).fabric_ip,
                                 plan.head.spec.master_port))
    return steps + [Ready(ctx.endpoint.url), LogChecks()]


def recorded_deployment(record: Release, inventory: Inventory, inventory_path: str,
                        inventory_doc: Document | None = None) -> Deployment:
    """The recipe exactly as the release deployed it, bound to an inventory already parsed (no file
    written, the inventory not read again); errors name the release and the line."""
    return bind_recipe_text(record.recipe_text, f"release {record.id} ({record.recipe}, as recorded)",
                            inventory, inventory_path, inventory_doc)


@dataclass
class RestoreResult:
    ok: bool
    release: Release | None
    detail: str  # what was restored, or why restoring failed
    interrupted: bool = False  # a second Ctrl-C (or SIGTERM) stopped the restore


def restore_previous(ctx: UpContext, ran: list[tuple[str, Container]]) -> RestoreResult:
    """Start the previous release's containers again (stopped by the undo, under their own names) with
    every wait `up` has. `ran`: (node, container) that were running before this `up`."""
    record = ctx.replaces
    if not ran:
        return RestoreResult(True, record, "nothing was serving before")
    ctx.cluster.renew_cancel()
    try:
        prev_dep = recorded_deployment(record, ctx.dep.inventory, ctx.dep.inventory_path,
                                       ctx.dep.inventory_doc) if record else None
    except Exception as exc:  # noqa: BLE001 - the record's recipe no longer loads: restart without its checks
        ctx.events.warn(f"release {record.id}'s recipe does not load with today's inventory ({exc}): restarting its "
                        "containers without its log checks")
        prev_dep = None
    by_node = {node: c for node, c in ran}
    prev_plan = build_plan(prev_dep, ctx.plan.run_id) if prev_dep else None
    if prev_plan is None or any(l.node.name not in by_node for l in prev_plan.ranks):
        return _restart_only(ctx, ran, record)
    restore_ctx = UpContext(prev_dep, prev_plan, ctx.cluster, ctx.events, ctx.opts,
                            ctx.endpoint_at(prev_dep.inventory.ranked[0].address, prev_dep.recipe.serve.port), Monitor(),
                            endpoint_at=ctx.endpoint_at)
    kept = {l.node.name: Kept(l.node.name, by_node[l.node.name]) for l in prev_plan.ranks}
    steps = kept_steps(restore_ctx, kept, undo_stops=False)
    for step in steps:
        step.detail = f"release {record.id}: {step.detail}"
    runner: Runner[UpContext] = Runner(ctx.events, before_undo=ctx.cluster.renew_cancel)
    try:
        with ctx.events.phase(Phase.RESTORE, f"release {record.id} ({record.recipe}, plan {record.plan_hash})"):
            runner.run(steps, restore_ctx)
    except StepFailed as exc:
        return RestoreResult(False, record, f"restoring release {record.id} failed {exc}", interrupted=exc.interrupted)
    finally:
        restore_ctx.monitor.stop()
    return RestoreResult(True, record, f"release {record.id} serves again at {restore_ctx.endpoint.url} "
                                       f"(ready, log checks passed)")


STOP_BOUND = 5  # seconds a restore's partial start gets to stop (SIGTERM), before SIGKILL


def stop_again(ctx: UpContext, ran: list[tuple[str, Container]]) -> list[str]:
    """After an interrupted restore: stop the previous deployment's containers again (by ID, kept under
    their names, every node at once, bounded), so that what the restore had started half-way is not left
    running as a release that does not generate. Returns the nodes where that did not succeed."""
    ctx.cluster.renew_cancel()  # stopping is new work after the interrupt
    by_node: dict[str, list[str]] = {}
    for node, container in ran:
        by_node.setdefault(node, []).append(container.id)

    def stop(conn) -> None:
        conn.run(["docker", "stop", "--time", str(STOP_BOUND), *by_node[conn.name]], timeout=STOP_BOUND + 15,
                 check=True)

    try:
        ctx.cluster.each(stop, [ctx.conn(node) for node in by_node])
    except GroupError as exc:
        return sorted(exc.failures)
    except Exception:  # noqa: BLE001 - whatever else: none is known to be stopped
        return sorted(by_node)
    return []


def _restart_only(ctx: UpContext, ran: list[tuple[str, Container]], record: Release | None) -> RestoreResult:
    """No loadable record, or the previous deployment was incomplete: start what ran, head first, and
    say that nothing was waited for."""
    head = ctx.plan.head.node.name
    with ctx.events.phase(Phase.RESTORE, "restart what ran before, head first (no record to check it against)"):
        for node, container in sorted(ran, key=lambda item: item[0] != head):
            start_container(ctx.conn(node), container.id)
            ctx.events.container(Kind.CONTAINER_RESTARTED, node, container.name, container.id)
    return RestoreResult(True, record, "the previous containers were started again, head first, but NOT waited for "
                                       "(no release record matches them): check `spark-deploy status`")
