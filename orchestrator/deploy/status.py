"""What is running: this tool's containers on every node, whether every rank runs one plan, and whether
the endpoint can generate — /health alone answers 200 on a half-dead cluster (field note 2)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from ..config.inventory import Inventory
from ..docker_cli.containers import Container, current_of
from ..facts.supervisor import SupervisorState
from ..http_api.endpoint import Endpoint
from ..operation import Observation
from ..transport.group import GroupError
from ..transport.node import NodeConnection
from .killers import earlyoom_note
from .readiness import completes, health
from .supervise import read_state as supervisor_state


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
    rank: int  # -1: the label is missing or not a number (ContainerLabels.parse)
    world: int
    serve_port: int
    served_model: str
    killed_by: str = ""  # for an exit by signal on a node where earlyoom runs: that it does (killers.py)


@dataclass
class EndpointState:
    url: str
    healthy: bool
    models: list[str]
    error: str = ""
    generates: bool | None = None  # None: not probed (--no-probe)
    probe: str = ""  # what the one short completion saw


@dataclass
class DeploymentState:
    recipe: str
    ok: bool
    problems: list[str] = field(default_factory=list)
    plan_hashes: list[str] = field(default_factory=list)
    release: int | None = None  # the serving release, from the records on the nodes (None: no record)
    release_outcome: str = ""
    release_known: bool = True  # False: a node was not read, so which release serves is unknown
    kv_cache: dict | None = None  # the serving release's predicted vs logged KV tokens (deploy/kv_report)
    engine: dict | None = None  # the serving release's engine fingerprint (facts/fingerprint.py)


@dataclass
class StatusReport:
    rows: list[ContainerRow]
    unreachable: dict[str, str]
    endpoints: list[EndpointState]
    deployments: list[DeploymentState] = field(default_factory=list)
    supervisor: SupervisorState | None = None  # None: the head was not read
    crash_loop: str = ""  # the supervisor stopped the release that would serve: its words, with the last cause

    @property
    def ok(self) -> bool:
        return not self.unreachable and not self.crash_loop and all(d.ok for d in self.deployments) and all(
            e.healthy and e.generates is not False for e in self.endpoints)

    def as_dict(self) -> dict:
        return {"ok": self.ok, "containers": [asdict(r) for r in self.rows], "unreachable": self.unreachable,
                "endpoints": [asdict(e) for e in self.endpoints], "deployments": [asdict(d) for d in self.deployments],
                "supervisor": asdict(self.supervisor) if self.supervisor else None, "crash_loop": self.crash_loop}


def _rows(conn: NodeConnection, containers: list[Container], recipe: str | None) -> list[ContainerRow]:
    rows = []
    for c in current_of(containers):  # not the previous releases' containers `up` keeps stopped
        if recipe is not None and c.ours.recipe != recipe:
            continue
        labels = c.ours
        exited = c.status == "exited"
        rows.append(ContainerRow(conn.name, c.name, f"exited ({c.exit_code})" if exited else c.status,
                                 c.started_at, c.image, labels.recipe, labels.recipe_digest, labels.plan_hash,
                                 labels.rank, labels.world, labels.serve_port, labels.served_model,
                                 earlyoom_note(conn, c.exit_code) if exited else ""))
    return rows


def judge(rows: list[ContainerRow], unreachable: dict[str, str]) -> list[DeploymentState]:
    """Per recipe: every rank present and running, and one plan hash on all of them."""
    out = []
    for recipe in sorted({r.recipe for r in rows}):
        mine = [r for r in rows if r.recipe == recipe]
        problems = [f"rank {r.rank} on {r.node} is {r.state}" + (f" ({r.killed_by})" if r.killed_by else "")
                    for r in mine if r.state != "running"]
        world = max((r.world for r in mine if r.world > 0), default=len(mine))
        present = {r.rank for r in mine}
        for rank in range(world):
            if rank not in present:
                where = f" (unreachable: {', '.join(unreachable)})" if unreachable else ""
                problems.append(f"rank {rank} has no container{where}")
        hashes = sorted({r.plan_hash for r in mine})
        if len(hashes) > 1:
            problems.append(f"the ranks run different plans: {', '.join(hashes)}")
        out.append(DeploymentState(recipe, not problems, problems, hashes))
    return out


PROBE_TIMEOUT = 15.0  # seconds the one short completion may take: a stuck scheduler answers /health only


def collect(inventory: Inventory, recipe: str | None = None, probe: bool = True,
            probe_timeout: float = PROBE_TIMEOUT) -> StatusReport:
    """Ask every reachable node (one state read each); an unreachable one is reported, not fatal."""
    with Observation(inventory, what="status") as seen:
        state = seen.state
        unreachable = {**state.unreachable, **{n: why for n, why in state.unread.items() if n not in state.containers}}
        try:
            found = seen.cluster.each(lambda c: _rows(c, state.containers[c.name], recipe),
                                      [c for c in seen.alive if c.name in state.containers])
        except GroupError as exc:
            found = exc.results
            unreachable.update({n: str(e) for n, e in exc.failures.items()})
        supervisor = _supervisor(seen.cluster, inventory, [c.name for c in seen.alive])
    rows = sorted((r for rs in found.values() for r in rs), key=lambda r: (r.recipe, r.rank))
    endpoints = [_endpoint(inventory, row, probe, probe_timeout) for row in rows
                 if row.rank == 0 and row.state == "running"]
    deployments = judge(rows, unreachable)
    serving = state.serving if state.serving_known else None
    for d in deployments:
        d.release_known = state.serving_known
        if d.ok and serving is not None and d.plan_hashes == [serving.plan_hash]:
            d.release, d.release_outcome = serving.id, serving.outcome_text()
            d.kv_cache = serving.kv_cache
            d.engine = serving.engine
    return StatusReport(rows, unreachable, endpoints, deployments, supervisor,
                        crash_loop(supervisor, serving.id if serving is not None else None))


def _supervisor(cluster, inventory: Inventory, alive: list[str]) -> SupervisorState | None:
    """The head's supervisor, when the head answered (a report: a failure is no supervisor said)."""
    if inventory.head not in alive:
        return None
    try:
        return supervisor_state(cluster[inventory.head], inventory)
    except Exception:  # noqa: BLE001 - status goes on; `supervise status` says why
        return None


def crash_loop(supervisor: SupervisorState | None, serving: int | None) -> str:
    """Pure: the supervisor's crash-loop words when the release it stopped is not replaced by one serving."""
    if supervisor is None or not supervisor.crash_looped:
        return ""
    if serving is not None and serving != supervisor.release:
        return ""
    return supervisor.detail


def _endpoint(inventory: Inventory, row: ContainerRow, probe: bool, probe_timeout: float) -> EndpointState:
    endpoint = Endpoint(inventory.node(row.node).address, row.serve_port if row.serve_port > 0 else 8000)
    try:
        seen = health(endpoint)
        models = endpoint.models() if seen.ok else []
        state = EndpointState(endpoint.url, seen.ok, models, "" if seen.ok else seen.what)
        if probe and seen.ok:
            answer: dict = {}
            try:  # bounded: a stuck scheduler answers /health but never generates
                generated = completes(endpoint, row.served_model, row.node, answer, timeout=probe_timeout)
                state.generates, state.probe = generated.ok, generated.what
            except Exception as exc:  # noqa: BLE001 - a refusal is a failed probe, with its reason
                state.generates, state.probe = False, str(exc)
        return state
    except Exception as exc:  # noqa: BLE001 - reported, not raised: status goes on with the others
        return EndpointState(endpoint.url, False, [], str(exc))
