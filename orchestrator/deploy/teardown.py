"""Stop and remove this tool's containers: peers first (in parallel), then the head."""

from __future__ import annotations

from ..docker_cli.containers import managed_containers, remove_container
from ..transport.group import Cluster, GroupError
from ..transport.node import NodeConnection


def remove_ranked(cluster: Cluster, containers: dict[str, list[str]]) -> dict[str, list[str]]:
    """Remove `containers` ({node: [names]}); peers go before the head so no rank waits on a dead head.

    Returns what was removed; failures are collected and raised once after every node was tried."""
    removed: dict[str, list[str]] = {}
    errors: dict[str, BaseException] = {}

    def remove_on(conn: NodeConnection) -> list[str]:
        return [name for name in containers.get(conn.name, []) if remove_container(conn, name)]

    for group in (cluster.peers, [cluster.head]):
        targets = [c for c in group if containers.get(c.name)]
        try:
            removed.update(cluster.each(remove_on, targets))
        except GroupError as exc:
            removed.update(exc.results)
            errors.update(exc.failures)
    if errors:
        raise GroupError(errors, removed)
    return removed


def ours(cluster: Cluster, recipe: str | None = None) -> dict[str, list[str]]:
    """This tool's containers on every node (optionally only one recipe's)."""
    return cluster.each(lambda conn: managed_containers(conn, recipe))
