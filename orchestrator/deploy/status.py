"""What is running: this tool's containers on every node, and what the head's API says."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from ..config.inventory import Inventory
from ..docker_cli.containers import ours
from ..transport.group import Cluster, GroupError
from ..transport.node import NodeConnection
from ..http_api.endpoint import Endpoint


@dataclass
class ContainerRow:
    node: str
    container: str
    state: str
    started_at: str
    image_id: str
    recipe: str
    recipe_hash: str
    plan_hash: str
    rank: str
    serve_port: str
    served_model: str


@dataclass
class EndpointState:
    url: str
    healthy: bool
    models: list[str]
    error: str = ""


@dataclass
class StatusReport:
    rows: list[ContainerRow]
    unreachable: dict[str, str]
    endpoints: list[EndpointState]

    def as_dict(self) -> dict:
        return {"containers": [asdict(r) for r in self.rows], "unreachable": self.unreachable,
                "endpoints": [asdict(e) for e in self.endpoints]}


def _rows(conn: NodeConnection, recipe: str | None) -> list[ContainerRow]:
    rows = []
    for c in ours(conn, recipe):
        if c.kept:
            continue  # a previous deployment's container, stopped by `up` and kept for undo/rollback
        labels = c.ours
        rows.append(ContainerRow(conn.name, c.name, c.status if c.status != "exited" else f"exited ({c.exit_code})",
                                 c.started_at, c.image, labels.recipe, labels.recipe_digest, labels.plan_hash,
                                 str(labels.rank), str(labels.serve_port), labels.served_model))
    return rows


def collect(inventory: Inventory, recipe: str | None = None) -> StatusReport:
    """Ask every reachable node; an unreachable one is reported, not fatal."""
    cluster = Cluster(inventory)
    try:
        alive, failures = cluster.open_reachable()
        unreachable = {node: str(exc) for node, exc in failures.items()}
        try:
            found = cluster.each(lambda c: _rows(c, recipe), alive)
        except GroupError as exc:
            found = exc.results
            unreachable.update({n: str(e) for n, e in exc.failures.items()})
    finally:
        cluster.close()
    rows = sorted((r for rs in found.values() for r in rs), key=lambda r: (r.recipe, int(r.rank or 0)))
    endpoints = [_endpoint(inventory, row) for row in rows if row.rank == "0" and row.state == "running"]
    return StatusReport(rows, unreachable, endpoints)


def _endpoint(inventory: Inventory, row: ContainerRow) -> EndpointState:
    endpoint = Endpoint(inventory.node(row.node).address, int(row.serve_port or 8000))
    try:
        healthy = endpoint.healthy()
        models = endpoint.models() if healthy else []
        return EndpointState(endpoint.url, healthy, models)
    except Exception as exc:
        return EndpointState(endpoint.url, False, [], str(exc))
