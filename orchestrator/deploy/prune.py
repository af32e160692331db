"""`prune [--keep N]`: remove the stopped containers and the images of releases older than the N newest
that served, per node, and report the bytes freed as `docker system df` measured them before and after.

Never touched: anything running (the serving release's containers above all), the containers and images
of the releases kept, and any image that any container on the node uses — including containers
spark-deploy did not create.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial

from ..config.inventory import Inventory
from ..docker_cli.containers import Container, list_containers, remove_container
from ..docker_cli.disk import disk_usage
from ..docker_cli.images import inspect_image
from ..operation import AuditAction, Operation, Outcome, Reach
from ..releases.keys import cluster_key
from ..releases.record import Release, ReleaseOutcome
from ..runner.events import Events, Kind
from ..transport.group import Cluster, Connector, GroupError
from ..transport.node import NodeConnection


@dataclass
class NodePruned:
    containers: list[str] = field(default_factory=list)  # names removed
    images: list[str] = field(default_factory=list)  # IDs removed
    freed: int = 0  # bytes, docker system df before - after
    error: str | None = None


@dataclass
class PruneResult:
    kept: list[int]
    serving: int | None
    serving_known: bool = True  # False: a node was not read, so which release serves is unknown (not "none")
    nodes: dict[str, NodePruned] = field(default_factory=dict)
    unreachable: dict[str, str] = field(default_factory=dict)

    @property
    def freed(self) -> int:
        return sum(n.freed for n in self.nodes.values())

    @property
    def ok(self) -> bool:
        return not self.unreachable and not any(n.error for n in self.nodes.values())


def to_remove(containers: list[Container], kept: list[Release], cluster: str | None = None) -> list[Container]:
    """Pure: our stopped containers that belong to no kept release (by the run label they carry); with
    `cluster`, only that cluster's (the same machines may serve another inventory)."""
    runs = {r.container_run for r in kept}
    return [c for c in containers if c.ours is not None and not c.running and c.ours.run not in runs
            and (cluster is None or c.ours.cluster == cluster)]


def prune(inventory: Inventory, keep: int, events: Events, *, connector: Connector | None = None) -> PruneResult:
    """On the nodes that answer (the head must: the lock lives there); an unreachable one is named, left as
    it is, and makes the result incomplete."""
    with Operation(inventory, events, AuditAction.PRUNE, reach=Reach.HEAD,
                   cluster_factory=partial(Cluster, connector=connector)) as op:
        state = op.state
        serving = state.serving if state.serving_known else None
        kept = state.kept(keep)
        if not state.serving_known:  # whichever serves is kept: every release whose record says it may serve
            kept += [r for r in state.releases if r.outcome in (ReleaseOutcome.SERVING, ReleaseOutcome.DEPLOYING)
                     and r not in kept]
        result = PruneResult([r.id for r in kept], serving.id if serving else None, state.serving_known,
                             unreachable=dict(op.unreachable))
        kept_images = {r.image_id for r in kept}
        old_images = {r.image_id for r in state.releases} - kept_images
        readable = [c for c in op.alive if c.name in state.containers]
        result.unreachable.update({n: why for n, why in state.unread.items() if n not in state.containers})

        def one(conn: NodeConnection) -> NodePruned:
            return _prune_node(conn, to_remove(state.containers[conn.name], kept, cluster_key(inventory)), old_images,
                               kept_images, events)

        try:
            result.nodes = op.cluster.each(one, readable)
        except GroupError as exc:
            result.nodes = dict(exc.results)
            result.nodes.update({n: NodePruned(error=str(e)) for n, e in exc.failures.items()})
        op.done(Outcome.OK if result.ok else Outcome.INCOMPLETE,
                f"kept releases {result.kept}; freed {result.freed} bytes; " + "; ".join(
                    f"{n}: {len(p.containers)} container(s), {len(p.images)} image(s)" for n, p in result.nodes.items()),
                nodes={n: p.error for n, p in result.nodes.items() if p.error}, kept=result.kept, freed=result.freed)
        return result


def _prune_node(conn: NodeConnection, containers: list[Container], old_images: set[str], kept_images: set[str],
                events: Events) -> NodePruned:
    done = NodePruned()
    before = disk_usage(conn)
    for c in containers:
        remove_container(conn, c.id)
        done.containers.append(c.name)
        events.container(Kind.CONTAINER_REMOVED, conn.name, c.name, c.id, f"{c.name} ({c.id[:12]}) removed")
    used = {c.image for c in list_containers(conn, [])}  # every container left, whoever made it
    for image_id in sorted((old_images | {c.image for c in containers}) - kept_images - used):
        found = inspect_image(conn, image_id)
        if found is None:
            continue  # not on this node
        tags = list(found.repo_tags)
        result = conn.run(["docker", "rmi", *(tags or [image_id])], timeout=120)
        if not result.ok and "No such image" not in result.stderr:
            done.error = f"could not remove image {image_id[:19]}: {result.stderr.strip()}"
            continue
        done.images.append(image_id)
        events.note(f"image {image_id[:19]} ({', '.join(tags) or 'untagged'}) removed", conn.name)
    done.freed = max(0, before.total - disk_usage(conn).total)
    return done

