"""`rollback`'s own step inside `up`: its refusals before anything is stopped, and whether the release's kept
containers can simply be started again.

Its own module because `rollback` calls `up` and `up` runs this step: both import it, neither the other."""

from __future__ import annotations

from ..checks.model_cache import revision_on
from ..docker_cli.containers import Container, list_containers
from ..releases.record import Release
from ..render.labels import Label
from ..runner.events import Phase
from ..runner.runner import StepFailed
from .context import UpContext
from .restore import Kept
from .steps_prepare import NoUndo


class CheckRollback(NoUndo):
    """Before anything is stopped: every node still holds the release's image ID and the same model
    revision; and whether its kept containers can simply be started again."""

    phase, detail = Phase.PREFLIGHT, "the release's image ID and model revision on every node; kept containers"

    def run(self, ctx: UpContext) -> None:
        target: Release = ctx.opts.rollback_of
        lacking = [n.conn.name for n in ctx.look.image.nodes if n.pinned is None]
        if lacking:
            raise StepFailed(self.phase, f"cannot roll back to release {target.id}: {', '.join(lacking)} no longer "
                             f"hold(s) its image {target.image_id} ({target.image_ref}); nothing was stopped. Load "
                             "that exact image there again (docker load), then retry", lacking)
        repo, revision = ctx.dep.recipe.model.repo, ctx.dep.recipe.model.revision
        now = ctx.cluster.each(lambda conn: revision_on(conn, ctx.dep.inventory.node(conn.name).hf_cache, repo, revision))
        moved = {node: (target.model.per_node.get(node, "?"), seen) for node, seen in now.items()
                 if node in target.model.per_node and target.model.per_node[node] != seen}
        if moved:
            raise StepFailed(self.phase, f"cannot roll back to release {target.id}: the model {repo}@{revision} "
                             "differs from what it ran on: " + "; ".join(
                                 f"{node} had {was or 'nothing'} and now has {seen or 'nothing'}"
                                 for node, (was, seen) in moved.items()) + "; nothing was stopped", sorted(moved))
        if ctx.plan.plan_hash == target.plan_hash:
            ctx.reuse = self._kept(ctx, target)
        if ctx.reuse:
            ctx.events.note(f"release {target.id}'s containers are kept on every node: started again, not re-created")
        else:
            ctx.events.note(f"release {target.id}'s containers are not all kept: created again from its record")

    def _kept(self, ctx: UpContext, target: Release) -> dict[str, Kept]:
        found: dict[str, Kept] = {}
        for launch in ctx.plan.ranks:
            conn = ctx.conn(launch.node.name)
            seen = list_containers(conn, [f"label={Label.PLAN_HASH}={target.plan_hash}",
                                          f"label={Label.RANK}={launch.rank}"])
            kept = pick_kept(seen, target, launch.rank, ctx.plan.cluster)
            if kept is None:
                return {}
            found[launch.node.name] = Kept(launch.node.name, kept)
        return found


def pick_kept(containers: list[Container], target: Release, rank: int, cluster: str) -> Container | None:
    """Pure: the stopped container of ours that runs `target`'s plan as `rank`, the release's own first. By
    labels only, whatever its name: `sd-RECIPE-rN-HASH8`, or `sd-RECIPE-rN-RUN` as an older spark-deploy
    renamed the containers it kept."""
    stopped = [c for c in containers if c.ours is not None and not c.running and c.ours.plan_hash == target.plan_hash
               and c.ours.rank == rank and c.ours.cluster in (cluster, "")]
    stopped.sort(key=lambda c: c.ours.run != target.container_run)
    return stopped[0] if stopped else None
