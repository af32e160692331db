"""`begin --stop`: stop the serving release for the window, peers first, keeping its containers.

They are stopped and renamed exactly as `up` keeps a release it replaces (`sd-RECIPE-rN-RUN`), so the
way back is the normal one: `rollback` finds them by plan hash and rank and `docker start`s them, head
first, with every wait and check. Each container is written into the result before it is touched, so a
failure halfway still says what was stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..deploy.down import teardown_order
from ..docker_cli.containers import Container, rename_container, stop_container
from ..releases.record import Release
from ..runner.events import Events, Kind
from ..transport.group import Cluster, GroupError
from .baseline import StoppedContainer


@dataclass
class StopResult:
    stopped: list[StoppedContainer] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # node -> why

    @property
    def ok(self) -> bool:
        return not self.failed


def kept_name(container: Container) -> str:
    """The name `up` keeps a replaced container under (deploy/steps_prepare.StopPrevious)."""
    return f"{container.name}-{(container.ours.run if container.ours else '') or container.id[:12]}"


def release_containers(release: Release, containers: dict[str, list[Container]]) -> dict[str, list[Container]]:
    """Pure: per node, the running containers of the release's plan."""
    out = {}
    for node, cs in containers.items():
        mine = [c for c in cs if c.running and c.ours and c.ours.plan_hash == release.plan_hash]
        if mine:
            out[node] = mine
    return out


def stop_release(cluster: Cluster, head: str, targets: dict[str, list[Container]], events: Events) -> StopResult:
    result = StopResult()

    def on(conn) -> None:
        for c in targets[conn.name]:
            entry = StoppedContainer(node=conn.name, id=c.id, name=c.name, kept=kept_name(c))
            result.stopped.append(entry)
            stop_container(conn, c.id)
            rename_container(conn, c.id, entry.kept)
            events.container(Kind.CONTAINER_STOPPED, conn.name, entry.kept, c.id,
                             f"{c.name} ({c.id[:12]}) stopped for the maintenance window, kept as {entry.kept}")

    for group in teardown_order(list(targets), head):
        try:
            cluster.each(on, [cluster[n] for n in group])
        except GroupError as exc:
            result.failed.update({n: str(e) for n, e in exc.failures.items()})
            break  # never stop the head while a peer could not be stopped cleanly
    return result
