"""Restart the serving release in place: a fresh engine process on every rank, same containers, same plan.

`spark-deploy restart` (restart_serving): the whole group by hand, after a rank died (the OOM killer, earlyoom,
an exit) — a tensor-parallel group cannot take one rank back, so the survivors are stopped too and every rank
starts again in `up`'s order. Its own Operation: the lock, one state read, one `restart` audit line naming
the ranks that were down and why (their exit code; the kernel's OOM kill when Docker saw it).

`bench --replicates` needs each replicate to begin where a real first run begins, right after the engine
starts (field note 16: the first run after a start said 69.3 tok/s, re-runs 38-42). `docker stop` then
`docker start` of the release's own containers gives a fresh server process from the same image ID, argv and
model, so the plan hash (and the release) stays the one measured; `up --redeploy` would do the same with a
new release record and a set of kept containers per replicate. The ranks are stopped peers first, then the
head, and started head first with every wait `up` has (restore.kept_steps: rendezvous, peers joined, ready,
log checks on the new log only). A body of the caller's Operation: it locks, reads and audits nothing itself.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from ..config.inventory import Inventory
from ..config.load import Deployment
from ..config.source import Document
from ..docker_cli.containers import Container, current_of, stop_container
from ..http_api.endpoint import Endpoint
from ..operation import AuditAction, Operation, Outcome, Reach
from ..operation.state import ClusterState
from ..releases.keys import cluster_key
from ..releases.record import Release
from ..releases.serving import containers_of, restart_target, rollback_target
from ..render.plan import build_plan
from ..runner.events import Events, Kind, Phase
from ..runner.runner import Runner, StepFailed
from ..transport.group import Cluster, Connector
from .context import UpContext, UpOptions
from .killers import earlyoom_note
from .restart_units import UnitsHeld, attached, let_go, watch_again
from .restore import Kept, kept_steps, recorded_deployment
from .watch import Monitor, stamp_seconds


class RestartRefused(Exception):
    """Nothing to restart (no release serves or was serving, another recipe's does, a rank has no container
    of it): nothing was touched."""


class RestartFailed(Exception):
    """The restart began and failed: the message says in which phase, and what serves now."""

    def __init__(self, message: str, interrupted: bool = False):
        super().__init__(message)
        self.interrupted = interrupted  # a Ctrl-C or SIGTERM stopped it: the audit line says `interrupted`


class StopRanks:
    """Stop the release's containers, peers first, then the head; they keep their names and labels.

    Undo stops every rank that ran (a tensor-parallel group cannot be rejoined rank by rank), so a failed
    restart leaves the release stopped as a whole, and says how to start it again."""

    phase = Phase.STOP_PREVIOUS

    def __init__(self, kept: dict[str, Kept], head: str):
        self.kept, self.head = kept, head
        self.detail = "peers first, then the head: docker stop (kept, started again below)"
        self.stopped: list[Kept] = []

    def run(self, ctx: UpContext) -> None:
        order = [k for n, k in self.kept.items() if n != self.head] + [self.kept[self.head]]
        for k in order:
            self.stopped.append(k)
            stop_container(ctx.conn(k.node), k.container.id)
            ctx.events.container(Kind.CONTAINER_STOPPED, k.node, k.name, k.container.id,
                                 f"{k.name} ({k.container.id[:12]}) stopped for a fresh start")

    def undo(self, ctx: UpContext) -> None:
        for k in self.kept.values():
            stop_container(ctx.conn(k.node), k.container.id)

    def leftover(self, ctx: UpContext) -> list[str]:
        return [f"{k.node}: {k.name} ({k.container.id[:12]}) stopped" for k in self.stopped]


def whole(release: Release, containers: dict[str, list[Container]], dep: Deployment) -> dict[str, Kept]:
    """Per rank's node, the release's container (the running one, else the one started last):
    RestartRefused when a rank has none. `containers`: the release's, running only (bench) or any state."""
    kept = {}
    for node in dep.inventory.ranked:
        mine = current_of(containers.get(node.name, []))
        if not mine:
            raise RestartRefused(f"release {release.id} has no container on {node.name}: nothing restarted "
                                 f"(`spark-deploy rollback {release.id}` deploys it again)")
        kept[node.name] = Kept(node.name, mine[0])
    return kept


def restart(cluster: Cluster, release: Release, running: dict[str, list[Container]], dep: Deployment,
            events: Events, opts: UpOptions, endpoint_at: Callable[[str, int], Endpoint] = Endpoint) -> list[str]:
    """Stop the release's containers (peers first) and start them again head first with every wait.
    `running`: per node, the release's containers as the operation read them; `dep`: the release's
    recorded recipe on today's inventory (its log checks are the ones held). StepFailed on a failure (the
    release is then left stopped as a whole). Returns the nodes whose boot unit watches its rank again
    (restart_units.py: let go of before the stop, started again after it)."""
    kept = whole(release, running, dep)
    units = attached(cluster, kept, release.recipe, events)
    try:
        let_go(cluster, units)  # before the stop: an attached unit's ExecStop would stop the rank started again
    except UnitsHeld as exc:
        raise RestartRefused(str(exc)) from exc
    plan = build_plan(dep)
    head = dep.inventory.ranked[0]
    ctx = UpContext(dep, plan, cluster, events, opts, endpoint_at(head.address, dep.recipe.serve.port), Monitor(),
                    endpoint_at=endpoint_at)
    steps = [StopRanks(kept, head.name), *kept_steps(ctx, kept, undo_stops=False)]
    for step in steps:
        step.detail = f"release {release.id}: {step.detail}"
    try:
        Runner(events, before_undo=cluster.renew_cancel).run(steps, ctx)
    finally:
        ctx.monitor.stop()
    return watch_again(cluster, units, release.recipe, events)


@dataclass
class Down:
    """A rank of the release that was not running when the restart began, and what the node knows of why."""

    rank: int
    node: str
    status: str
    exit_code: int
    cause: str = ""  # "the kernel's OOM killer", earlyoom's note, or ""
    since: float | None = None  # when it stopped (Docker's FinishedAt, the node's clock), epoch seconds

    def words(self) -> str:
        return (f"rank {self.rank} on {self.node} {self.status} (exit {self.exit_code})"
                + (f": {self.cause}" if self.cause else ""))

    def down_for(self, now: float) -> str:
        """"down 63 s": from its stop to `now` (the group serving again), by the controller's clock."""
        return f"down {max(0.0, now - self.since):.0f} s" if self.since is not None else "down since unknown"


@dataclass
class RestartResult:
    release: Release
    endpoint: str
    down: list[Down] = field(default_factory=list)


def down_ranks(kept: dict[str, Kept]) -> list[Down]:
    """Pure: the ranks whose container does not run, with Docker's word for an OOM kill, rank order."""
    out = [Down(k.container.ours.rank if k.container.ours else -1, node, k.container.status, k.container.exit_code,
                "the kernel's OOM killer (Docker: OOMKilled)" if k.container.oom_killed else "",
                stamp_seconds((k.container.raw.get("State") or {}).get("FinishedAt")))
           for node, k in kept.items() if not k.container.running]
    return sorted(out, key=lambda d: d.rank)


def choose(state: ClusterState, recipe: str | None) -> Release:
    """The release to restart, from the operation's one reading: RestartRefused saying why there is none."""
    if not state.serving_known:
        raise RestartRefused("cannot tell what serves: " + "; ".join(state.problems()))
    release = restart_target(state.releases, state.containers, cluster_key(state.inventory))
    if release is None:
        raise RestartRefused(f"no release serves or was serving on {state.inventory.cluster}: nothing to restart "
                             "(`spark-deploy up RECIPE` deploys one)")
    if recipe is not None and release.recipe != recipe:
        raise RestartRefused(f"release {release.id} of {release.recipe!r} is the one serving on "
                             f"{state.inventory.cluster}, not {recipe!r}: nothing restarted")
    return release


def what_serves(op: Operation, release: Release) -> str:
    """After a failed restart: what serves now, read again, and the command that brings a release back."""
    try:
        state = op.reread()
    except Exception as exc:  # noqa: BLE001 - said, not guessed
        return f"what serves now could not be read ({exc}): check `spark-deploy status`"
    if not state.serving_known:
        return "what serves now is unknown (" + "; ".join(state.problems()) + "): check `spark-deploy status`"
    now = state.serving
    if now is not None:
        return f"release {now.id} serves"
    try:
        before = rollback_target(state.releases, release, None)
        other = f", or `spark-deploy rollback {before.id}` the release that served before it"
    except ValueError:
        other = ""
    return (f"nothing serves: release {release.id}'s containers are stopped; `spark-deploy rollback {release.id}` "
            f"deploys it again{other}")


def restart_serving(inventory: Inventory, inventory_path: str, recipe: str | None, events: Events, *,
                    inventory_doc: Document | None = None, options: UpOptions | None = None,
                    connector: Connector | None = None,
                    endpoint_at: Callable[[str, int], Endpoint] = Endpoint) -> RestartResult:
    """`restart [RECIPE]` as one operation: open every node, lock, read; the release that serves (or was
    serving until a rank died), of `recipe` when given; its whole group stopped and started in order with
    every wait (restart above); one `restart` audit line naming the ranks that were down."""
    opts = options or UpOptions()
    with Operation(inventory, events, AuditAction.RESTART, reach=Reach.ALL,
                   ttl=max(opts.ready_timeout, opts.listen_timeout) + 600,
                   cluster_factory=partial(Cluster, connector=connector)) as op:
        try:
            release = choose(op.state, recipe)
            dep = recorded_deployment(release, inventory, inventory_path, inventory_doc)
            mine = containers_of(release, op.state.containers)
            down = down_ranks(whole(release, mine, dep))
        except RestartRefused as exc:
            op.done(Outcome.REFUSED, str(exc))
            raise
        for d in down:
            d.cause = d.cause or earlyoom_note(op.cluster[d.node], d.exit_code)
            events.warn(f"{d.words()}: the whole group is restarted", d.node)
        said = "; ".join(d.words() for d in down) or "every rank was running"
        try:
            units = restart(op.cluster, release, mine, dep, events, opts, endpoint_at)
        except StepFailed as exc:
            now = what_serves(op, release)
            op.done(Outcome.FAILED, f"release {release.id}: {said}; restart failed in {exc.phase}; {now}",
                    release=release.id)
            raise RestartFailed(f"restarting release {release.id} failed {exc}\n{now}", exc.interrupted) from exc
        head = dep.inventory.ranked[0]
        url = endpoint_at(head.address, dep.recipe.serve.port).url
        served = time.time()
        downs = "".join(f"; rank {d.rank} {d.down_for(served)}" for d in down)
        downs += f"; boot units watch again on {', '.join(units)}" if units else ""
        op.done(Outcome.OK, f"release {release.id}: {said}; restarted whole, serves again{downs}",
                release=release.id)
        return RestartResult(release, url, down)
