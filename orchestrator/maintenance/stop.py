"""`begin --stop`: stop the serving release for the window, peers first, keeping its containers.

They are stopped, never renamed, exactly as `up` keeps a release it replaces (their names carry their plan),
so the way back is the normal one: `rollback` finds them by plan hash and rank and `docker start`s them, head
first, with every wait and check. Each container is written into the result before it is touched, so a
failure halfway still says what was stopped.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from ..deploy.down import teardown_order
from ..docker_cli.containers import Container, inspect_container, stop_container
from ..releases.record import Release
from ..releases.serving import running_of
from ..runner.events import Events, Kind
from ..transport.group import Cluster, GroupError
from ..transport.node import NodeError
from ..window.baseline import StoppedContainer


class StopOutcome(StrEnum):
    """Where a `--stop` left the release: one of the two states `maintenance end` can work from."""

    STOPPED = "stopped"  # every rank that answers is stopped and kept; recorded, `end` brings it back
    STILL_SERVING = "still serving"  # nothing was stopped: every rank runs as before
    NOTHING = "nothing to stop"


@dataclass
class StopResult:
    stopped: list[StoppedContainer] = field(default_factory=list)
    failed: dict[str, str] = field(default_factory=dict)  # node -> why
    outcome: StopOutcome = StopOutcome.NOTHING

    @property
    def ok(self) -> bool:
        return not self.failed

    def summary(self, release: int | None) -> str:
        if self.outcome is StopOutcome.STILL_SERVING:
            return (f"nothing was stopped: release {release} still serves on every node, as before" if release
                    is not None else "nothing was stopped: whatever served still serves, as before")
        if self.outcome is StopOutcome.STOPPED and self.failed:
            return (f"release {release} is stopped on every node that answered and recorded as stopped; once "
                    f"{', '.join(self.failed)} answer(s), `spark-deploy maintenance end` brings it back")
        return f"release {release} is stopped: `spark-deploy maintenance end` brings it back"


def unread_ranks(release: Release, containers: dict[str, list[Container]], why: dict[str, str]) -> dict[str, str]:
    """Pure: the release's rank nodes whose containers were not read (node -> why)."""
    return {r.node: why.get(r.node, "not read") for r in release.ranks if r.node not in containers}


def stop_release(cluster: Cluster, head: str, release: Release, containers: dict[str, list[Container]],
                 why_unread: dict[str, str], events: Events) -> StopResult:
    """Peers first, then the head. A rank's node that was not read refuses the stop before anything is
    touched (the rest stopped would leave its rank running alone). A failure partway ends in one of two
    states: nothing stopped (every touched container still runs: still serving), or every rank that answers
    stopped — a TP release with one rank down serves nothing, so the rest is stopped too and kept for `end`."""
    result = StopResult()
    targets = running_of(release, containers)
    missing = unread_ranks(release, containers, why_unread)
    if missing:
        result.failed = {n: f"its containers could not be read ({why}): nothing was stopped anywhere, the release "
                            "serves as it did" for n, why in missing.items()}
        result.outcome = StopOutcome.STILL_SERVING
        return result
    if not targets:
        return result

    def on(conn) -> None:
        for c in targets[conn.name]:
            entry = StoppedContainer(node=conn.name, id=c.id, name=c.name, kept=c.name)
            result.stopped.append(entry)  # before it is touched: a failure halfway still names it
            stop_container(conn, c.id)
            events.container(Kind.CONTAINER_STOPPED, conn.name, c.name, c.id,
                             f"{c.name} ({c.id[:12]}) stopped for the maintenance window, kept")

    groups = teardown_order(list(targets), head)
    for i, group in enumerate(groups):
        try:
            cluster.each(on, [cluster[n] for n in group])
        except GroupError as exc:
            result.failed.update({n: str(e) for n, e in exc.failures.items()})
            _settle(cluster, result, groups[i + 1:], targets, on, events)
            return result
    result.outcome = StopOutcome.STOPPED
    return result


def _still_running(cluster: Cluster, entry: StoppedContainer) -> bool | None:
    """True/False when the node answers an inspect of the container, None when it does not."""
    try:
        found = inspect_container(cluster[entry.node], entry.id)
    except (NodeError, OSError):
        return None
    return bool(found and found.running)


def _settle(cluster: Cluster, result: StopResult, rest: list[list[str]], targets, on, events: Events) -> None:
    """After a failed group: if every container touched still runs, nothing was stopped (forget them);
    otherwise stop what is left on every node that answers (the head included), so the release is fully
    stopped, and keep every touched container in the list `end` brings back."""
    seen = {e.id: _still_running(cluster, e) for e in result.stopped}
    if all(seen.values()):
        result.stopped.clear()
        result.outcome = StopOutcome.STILL_SERVING
        return
    events.warn("a rank of the release is down or unknown: stopping the others too, so that the release is fully "
                "stopped and `maintenance end` can bring it back")
    for group in rest:
        try:
            cluster.each(on, [cluster[n] for n in group])
        except GroupError as exc:
            result.failed.update({n: str(e) for n, e in exc.failures.items()})
    result.outcome = StopOutcome.STOPPED
