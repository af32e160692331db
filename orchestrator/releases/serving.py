"""Which release serves now, judged from the running containers' labels — not from the records alone.

Pure functions over inspect results (docker_cli.containers.Container), so the rules are unit-tested
without Docker.
"""

from __future__ import annotations

from ..docker_cli.containers import Container
from .record import ENDED, Release, ReleaseOutcome


def serving_plans(containers: dict[str, list[Container]], cluster: str | None = None) -> set[str]:
    """Plan hashes that run on every rank of their world (one running container per rank)."""
    ranks: dict[str, set[int]] = {}
    world: dict[str, int] = {}
    for cs in containers.values():
        for c in cs:
            labels = c.ours
            if labels is None or not c.running or (cluster and labels.cluster != cluster):
                continue
            ranks.setdefault(labels.plan_hash, set()).add(labels.rank)
            world[labels.plan_hash] = labels.world
    return {h for h, seen in ranks.items() if seen == set(range(world[h]))}


def serving_release(releases: list[Release], containers: dict[str, list[Container]],
                    cluster: str | None = None) -> Release | None:
    """The newest release whose plan runs on every rank; a record that says "serving" wins over an older
    one of the same plan (a rollback re-deploys an old plan as a new release)."""
    plans = serving_plans(containers, cluster)
    candidates = [r for r in releases if r.plan_hash in plans]  # releases come newest first
    if not candidates:
        return None
    live = [r for r in candidates if r.outcome is ReleaseOutcome.SERVING]
    return (live or candidates)[0]


def ever_served(release: Release) -> bool:
    return release.outcome is ReleaseOutcome.SERVING or (
        release.outcome in ENDED and release.outcome not in (ReleaseOutcome.FAILED, ReleaseOutcome.ABANDONED))


def rollback_target(releases: list[Release], current: Release | None, wanted: int | None) -> Release:
    """Pure: the release `rollback` deploys. With no `wanted`: the newest release before the current one
    that served, with another plan. Raises ValueError saying why there is none."""
    if wanted is not None:
        target = next((r for r in releases if r.id == wanted), None)
        if target is None:
            known = ", ".join(str(r.id) for r in releases) or "none"
            raise ValueError(f"there is no release {wanted} (known: {known})")
        if current is not None and target.plan_hash == current.plan_hash:
            raise ValueError(f"release {wanted} runs plan {target.plan_hash}, which is what serves now "
                             f"(release {current.id}): nothing to roll back to")
        if not ever_served(target):
            raise ValueError(f"release {wanted} never served ({target.outcome_text()}): refusing to deploy it again")
        return target
    below = current.id if current is not None else max((r.id for r in releases), default=0) + 1
    for r in releases:
        if r.id < below and ever_served(r) and (current is None or r.plan_hash != current.plan_hash):
            return r
    where = f"before release {current.id}" if current else "in the history"
    raise ValueError(f"no release {where} ever served with another plan: nothing to roll back to")


def kept_releases(releases: list[Release], serving: Release | None, keep: int) -> list[Release]:
    """Pure: the serving release plus the `keep` newest releases that served (newest first)."""
    chosen = [r for r in releases if ever_served(r)][:keep]
    if serving is not None and serving not in chosen:
        chosen.insert(0, serving)
    return chosen


def running_of(release: Release, containers: dict[str, list[Container]]) -> dict[str, list[Container]]:
    """Pure: per node, the running containers of the release's plan."""
    out = {}
    for node, cs in containers.items():
        mine = [c for c in cs if c.running and c.ours and c.ours.plan_hash == release.plan_hash]
        if mine:
            out[node] = mine
    return out


def restart_target(releases: list[Release], containers: dict[str, list[Container]],
                   cluster: str | None = None) -> Release | None:
    """Pure: the release `restart` brings back — the one that serves, else the newest whose record still
    says "serving" (a rank of it died: its plan no longer runs on every rank, so no release serves). None
    when neither exists (nothing was deployed, or it was stopped, replaced or rolled back)."""
    serving = serving_release(releases, containers, cluster)
    if serving is not None:
        return serving
    return next((r for r in releases if r.outcome is ReleaseOutcome.SERVING), None)


def containers_of(release: Release, containers: dict[str, list[Container]]) -> dict[str, list[Container]]:
    """Pure: per node, the containers of the release's plan, running or not (a dead rank's included)."""
    out = {}
    for node, cs in containers.items():
        mine = [c for c in cs if c.ours and c.ours.plan_hash == release.plan_hash]
        if mine:
            out[node] = mine
    return out
