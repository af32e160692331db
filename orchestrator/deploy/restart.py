"""Restart the serving release in place: a fresh engine process on every rank, same containers, same plan.

`bench --replicates` needs each replicate to begin where a real first run begins, right after the engine
starts (field note 16: the first run after a start said 69.3 tok/s, re-runs 38-42). `docker stop` then
`docker start` of the release's own containers gives a fresh server process from the same image ID, argv and
model, so the plan hash (and the release) stays the one measured; `up --redeploy` would do the same with a
new release record and a set of kept containers per replicate. The ranks are stopped peers first, then the
head, and started head first with every wait `up` has (restore.kept_steps: rendezvous, peers joined, ready,
log checks on the new log only). A body of the caller's Operation: it locks, reads and audits nothing itself.
"""

from __future__ import annotations

from typing import Callable

from ..config.load import Deployment
from ..docker_cli.containers import Container, current_of, stop_container
from ..http_api.endpoint import Endpoint
from ..releases.record import Release
from ..render.plan import build_plan
from ..runner.events import Events, Kind, Phase
from ..runner.runner import Runner
from ..transport.group import Cluster
from .context import UpContext, UpOptions
from .restore import Kept, kept_steps
from .watch import Monitor


class RestartRefused(Exception):
    """The release does not run whole (a rank without exactly one running container): nothing was touched."""


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


def whole(release: Release, running: dict[str, list[Container]], dep: Deployment) -> dict[str, Kept]:
    """Per rank's node, the release's one running container (the newest when several): RestartRefused
    when a rank has none."""
    kept = {}
    for node in dep.inventory.ranked:
        mine = current_of(running.get(node.name, []))
        if not mine:
            raise RestartRefused(f"release {release.id} does not run on {node.name}: nothing restarted")
        kept[node.name] = Kept(node.name, mine[0])
    return kept


def restart(cluster: Cluster, release: Release, running: dict[str, list[Container]], dep: Deployment,
            events: Events, opts: UpOptions, endpoint_at: Callable[[str, int], Endpoint] = Endpoint) -> None:
    """Stop the release's containers (peers first) and start them again head first with every wait.
    `running`: per node, the release's running containers as the operation read them; `dep`: the release's
    recorded recipe on today's inventory (its log checks are the ones held). StepFailed on a failure (the
    release is then left stopped as a whole)."""
    kept = whole(release, running, dep)
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
