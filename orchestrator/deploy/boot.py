"""`boot enable|disable|status`: make the serving release the thing that comes back when the nodes boot.

`enable` writes, per node, the unit render/unit.py renders for its rank (from the same Plan as `up`), enables
it and starts it (it attaches to the running container, so systemd restarts a rank that exits from now on);
anything else the boot check finds coming back (another stack's unit, a container with a restart policy that
brings it back) is named, and only with `yes` disabled. `disable` lets go of the containers (they keep
serving), removes our units and gives the containers back the restart policy the unit took from them.
`status` reads what would come back, per node, through the same facts and judgement as the `boot` preflight
check (preflight's checks_boot.py, over facts/boot.py).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import cast

from ..config.inventory import Inventory
from ..config.load import Deployment
from ..docker_cli.containers import Container
from ..operation import AuditAction, Observation, Operation, OperationRefused, Outcome, Reach
from ..facts.boot import (
    BootItem,
    BootMatch,
    BootUnits,
    ItemKind,
    NodeBoot,
    UnitInfo,
    node_boot,
)
from ..facts.core import FactInput, Observed, gather_node
from ..releases.keys import cluster_key
from ..releases.lock import LockError
from ..releases.record import Release
from ..render.plan import Plan, build_plan
from ..render.unit import UNIT_DIR, BootUnit, render_unit, unit_name
from ..runner.events import Events
from ..transport.group import Cluster, Connector, GroupError
from ..transport.node import NodeConnection, NodeError
from . import boot_supervise, privilege
from .boot_undo import Journal, install, turn_off
from .supervise import read_state

FACTS = ["boot_units", "restart_policies"]


class BootRefused(Exception):
    """What the user asked cannot be done as things are (exit 1); the message names node and cause."""


@dataclass
class Looked:
    """One reading of the cluster: which release serves, and each node's boot facts."""

    serving: Release | None
    containers: dict[str, list[Container]]
    facts: dict[str, dict[str, Observed]]
    unreachable: dict[str, str] = field(default_factory=dict)
    serving_unknown: str = ""  # why which release serves cannot be said (a node not read); "" when it can

    def boot(self, node: str, plans: set[str]) -> NodeBoot:
        return node_boot(self.facts.get(node, {}), plans)

    def units(self, node: str) -> BootUnits | None:
        obs = self.facts.get(node, {}).get("boot_units")
        return obs.value if obs is not None and obs.ok else None

    def without_systemd(self) -> dict[str, str]:
        """{node: why} for the nodes whose boot units cannot be read or where systemd is not PID 1."""
        out = {}
        for node, facts in self.facts.items():
            obs = facts.get("boot_units")
            if obs is None or not obs.ok:
                out[node] = f"its systemd units could not be read: {obs.error if obs else 'not gathered'}"
            elif not obs.value.systemd:
                out[node] = f"not a systemd node ({obs.value.why})"
        return out


def read_boot(conn: NodeConnection) -> dict[str, Observed]:
    """The boot facts of one node, in one SSH command (they take no arguments: no deployment needed)."""
    return gather_node(conn, FACTS, cast(FactInput, None), timeout=60)


def look(op: Operation) -> Looked:
    """The operation's state (which release serves, our containers) and each node's boot facts, read now."""
    state = op.state
    readable = [c for c in op.alive if c.name in state.containers]
    failures = {n: why for n, why in {**state.unreachable, **state.unread}.items() if n not in state.containers}
    try:
        facts = op.cluster.each(read_boot, readable)
    except GroupError as exc:
        failures.update({n: str(e) for n, e in exc.failures.items()})
        facts = dict(exc.results)
    return Looked(state.serving if state.serving_known else None, dict(state.containers), facts, failures,
                  "" if state.serving_known else "; ".join(state.problems()) or "a node's containers were not read")


def _no_systemd(looked: Looked) -> None:
    missing = looked.without_systemd()
    if missing:
        raise BootRefused("; ".join(f"{node}: {why}: a boot unit needs systemd as PID 1" for node, why in
                                    missing.items()))


# ---- enable -------------------------------------------------------------------------------------------

@dataclass
class Conflict:
    """Something else that comes back on boot on a node: what `enable --yes` turns off."""

    node: str
    item: BootItem

    def describe(self) -> str:
        return f"{self.node}: {self.item.kind} {self.item.name} ({self.item.match}: starts {self.item.starts})"


@dataclass
class EnableResult:
    release: Release
    units: list[BootUnit]
    conflicts: list[Conflict]
    disabled: list[str] = field(default_factory=list)  # what --yes turned off, "node: unit/container"
    after: dict[str, NodeBoot] = field(default_factory=dict)  # what comes back now, read again


def conflicts_for(looked: Looked, plan: Plan, ours_name: str) -> list[Conflict]:
    """Pure: everything that comes back on boot and is not this plan — our own unit (it is rewritten) aside."""
    found = []
    for launch in plan.ranks:
        node = launch.node.name
        for item in looked.boot(node, {plan.plan_hash}).items:
            if item.kind is ItemKind.UNIT and item.name == ours_name:
                continue
            if item.match is not BootMatch.SERVING:
                found.append(Conflict(node, item))
    return found


def enable(dep: Deployment, events: Events, *, yes: bool, connector: Connector | None = None) -> EnableResult:
    """Every node must answer (a unit on some ranks only would bring back half a TP group)."""
    inventory = dep.inventory
    with Operation(inventory, events, AuditAction.BOOT_ENABLE, reach=Reach.ALL,
                   cluster_factory=partial(Cluster, connector=connector)) as op:
        plan = build_plan(dep).for_cluster(cluster_key(inventory))
        name = unit_name(plan.cluster, plan.recipe)
        cluster, conns = op.cluster, op.alive
        looked = look(op)
        if looked.unreachable:
            raise BootRefused("; ".join(f"{n}: {why}" for n, why in looked.unreachable.items()))
        release, names = _serving_matches(looked, plan)
        _no_systemd(looked)
        _no_supervisor(op)
        roots = _roots(op, f"boot enable (it installs {UNIT_DIR}/{name} and runs systemctl enable)", release.id)
        units = [render_unit(plan, launch, release.id, container=names[launch.node.name]) for launch in plan.ranks]
        conflicts = conflicts_for(looked, plan, name)
        result = EnableResult(release, units, conflicts)
        if conflicts and not yes:
            op.done(Outcome.REFUSED, "other things come back on boot: " + "; ".join(c.describe() for c in conflicts),
                    release=release.id)
            return result
        journal = Journal()
        try:
            for c in conflicts:
                turn_off(cluster[c.node], c.item, roots[c.node], journal)
                result.disabled.append(f"{c.node}: {c.item.kind} {c.item.name}")
                events.note(f"{c.item.kind} {c.item.name} no longer comes back on boot", c.node)
            cluster.each(lambda conn: _install(conn, next(u for u in units if u.node == conn.name),
                                               roots[conn.name], inventory.node(conn.name).state_dir,
                                               journal), conns)
        except (GroupError, NodeError, BootRefused) as exc:
            undone, left = journal.roll_back()
            for line in undone:
                node, _, what = line.partition(": ")
                events.note(what, node)
            said = (f"put back as it was: {'; '.join(undone) or 'nothing had been changed'}" +
                    (f"; NOT put back: {'; '.join(left)}" if left else ""))
            op.done(Outcome.FAILED, f"{exc}; {said}", release=release.id)
            raise BootRefused(f"boot enable failed: {exc}; {said}") from exc
        for u in units:
            events.note(f"{u.name} enabled and started: brings back {u.container} (release {u.release}, plan "
                        f"{u.plan_hash}) at boot, and starts it again when it exits", u.node)
        again = look(op)
        result.after = {n: again.boot(n, {plan.plan_hash}) for n in again.facts}
        op.done(Outcome.OK, f"{name} on {', '.join(u.node for u in units)}; plan {plan.plan_hash}" +
                (f"; turned off: {'; '.join(result.disabled)}" if result.disabled else ""), release=release.id)
        return result


def _no_supervisor(op: Operation) -> None:
    """One watcher per release: a group supervisor's restarts and a unit's single-rank restart (and its
    ExecStop's `docker stop`) would fight (docs/recovery.md)."""
    sup = read_state(op.cluster.head, op.inventory)
    if sup.active in ("active", "activating"):
        raise BootRefused(f"a group supervisor runs on {op.inventory.head} ({sup.line()}): it restarts the whole "
                          "group, and a boot unit's single-rank restart would fight it; `spark-deploy supervise "
                          "disable` first")


def _serving_matches(looked: Looked, plan: Plan) -> tuple[Release, dict[str, str]]:
    """The serving release, and per node the name of the container that serves its rank (found by its
    labels: the unit starts it by that name, which never changes)."""
    serving = looked.serving
    if looked.serving_unknown:
        raise BootRefused(f"cannot tell what serves on {plan.cluster}: {looked.serving_unknown}")
    if serving is None:
        raise BootRefused(f"nothing serves on {plan.cluster}: `boot enable` makes the serving release come back "
                          "on boot; deploy it first (`spark-deploy up`)")
    if serving.plan_hash != plan.plan_hash:
        raise BootRefused(f"the recipe {plan.recipe} renders plan {plan.plan_hash}, but release {serving.id} "
                          f"({serving.recipe}, plan {serving.plan_hash}) is what serves: pass the recipe of the "
                          f"serving release (`spark-deploy history --recipe {serving.id} -o release-{serving.id}.yaml` "
                          "writes it), or `up` this one first")
    names = {}
    for launch in plan.ranks:
        running = [c for c in looked.containers.get(launch.node.name, [])
                   if c.running and c.ours and c.ours.plan_hash == plan.plan_hash and c.ours.rank == launch.rank]
        if len(running) != 1:
            raise BootRefused(f"{launch.node.name}: {len(running)} running containers serve rank {launch.rank} of "
                              f"plan {plan.plan_hash} ({', '.join(c.name for c in running) or 'none'}): one is "
                              "needed for the unit to start")
        names[launch.node.name] = running[0].name
    return serving, names


def _roots(op: Operation, doing: str, release: int | None = None):
    """Every node's way to root, or BootRefused (audited as refused) before anything is changed."""
    roots = privilege.find(op.cluster, op.alive)
    refused = privilege.refusal(roots, doing)
    if refused:
        op.done(Outcome.REFUSED, refused, release=release)
        raise BootRefused(refused)
    return roots


def _install(conn: NodeConnection, unit: BootUnit, root: privilege.Root, scratch_dir: str, journal: Journal) -> None:
    try:
        install(conn, unit, root, scratch_dir, journal)
        boot_supervise.start(conn, unit, root, journal)
    except (NodeError, OSError) as exc:  # a NodeError: the group error names the node once
        cause = str(exc).removeprefix(f"{conn.name}: ")
        raise NodeError(conn.name, f"could not install {unit.path}: {cause} (it needs root on the node)") from exc


# ---- after an `up`: the units follow the release ---------------------------------------------------------

def units_behind(facts: dict[str, dict[str, Observed]], inventory: Inventory, recipe: str,
                 release: int) -> dict[str, str]:
    """Pure: per node, the release our enabled unit for this recipe brings back, where it is not `release`
    (from the boot facts up's preflight gathered; a node whose facts are missing, or has no systemd, says
    nothing)."""
    name = unit_name(cluster_key(inventory), recipe)
    behind = {}
    for node, seen in facts.items():
        obs = seen.get("boot_units")
        if obs is None or not obs.ok or not obs.value.systemd:
            continue
        info = next((u for u in obs.value.units if u.id == name), None)
        if info is not None and info.key("Release") != str(release):
            behind[node] = info.key("Release") or "?"
    return behind


def follow(dep: Deployment, events: Events, behind: dict[str, str], connector: Connector | None = None) -> None:
    """`up`'s last word when boot was enabled for an earlier release of this recipe: a unit starts the
    container it was enabled for, by a name that never changes, so it is pointed at the release serving now
    (`boot enable`, without --yes) — or it is said loudly that a reboot would bring back the earlier one."""
    was = ", ".join(f"{n}: release {r}" for n, r in behind.items())
    events.note(f"boot was enabled for an earlier release ({was}): enabling it for the release serving now")
    fix = f"`spark-deploy boot enable {dep.recipe_path}`"
    try:
        result = enable(dep, events, yes=False, connector=connector)
    except (BootRefused, LockError, NodeError, OperationRefused, GroupError) as exc:
        events.warn(f"a reboot would bring back the earlier release ({was}), not this one: {exc}; {fix} once "
                    "that is fixed")
        return
    if result.conflicts:
        events.warn(f"a reboot would bring back the earlier release ({was}), not this one: other things come back "
                    "on boot too (" + "; ".join(c.describe() for c in result.conflicts) + f"): {fix} --yes")


# ---- disable ------------------------------------------------------------------------------------------

@dataclass
class DisableResult:
    removed: dict[str, list[str]] = field(default_factory=dict)  # node -> units removed


def our_units(units: BootUnits | None, cluster_name: str, recipe: str | None) -> list[str]:
    """Pure: our unit files on a node (any state) for this cluster, and this recipe when given."""
    if units is None or not units.systemd:
        return []
    wanted = unit_name(cluster_name, recipe) if recipe else None
    prefix = unit_name(cluster_name, "")[: -len(".service")]
    return [n for n, _state in units.our_files if (n == wanted if wanted else n.startswith(prefix))]


def disable(inventory: Inventory, recipe: str | None, events: Events, *,
            connector: Connector | None = None) -> DisableResult:
    with Operation(inventory, events, AuditAction.BOOT_DISABLE, reach=Reach.ALL,
                   cluster_factory=partial(Cluster, connector=connector)) as op:
        looked = look(op)
        _no_systemd(looked)
        roots = _roots(op, f"boot disable (it removes units from {UNIT_DIR} and runs systemctl disable)")
        result = DisableResult()

        def one(conn: NodeConnection) -> list[str]:
            names = our_units(looked.units(conn.name), cluster_key(inventory), recipe)
            enabled = {u.id: u for u in (looked.units(conn.name) or BootUnits(True)).units}
            for name in names:
                _remove(conn, name, enabled.get(name), roots[conn.name])
            if names:
                conn.run(roots[conn.name].argv(["systemctl", "daemon-reload"]), timeout=60, check=True)
            return names

        try:
            result.removed = op.cluster.each(one, op.alive)
        except GroupError as exc:
            op.done(Outcome.FAILED, str(exc))
            raise BootRefused(f"boot disable failed: {exc}") from exc
        for node, names in result.removed.items():
            for name in names:
                events.note(f"{name} disabled and removed", node)
        op.done(Outcome.OK, "; ".join(f"{n}: {', '.join(u) or 'none'}" for n, u in result.removed.items()))
        return result


def _remove(conn: NodeConnection, name: str, unit: UnitInfo | None, root: privilege.Root) -> None:
    """Disable, let go of the running container (it keeps serving), give it back the restart policy the unit
    took, remove the file."""
    conn.run(root.argv(["systemctl", "disable", name]), timeout=60, check=True)
    boot_supervise.let_go(conn, name, root)
    if unit is not None and unit.key("Container") and unit.key("DockerRestart") not in ("", "no"):
        conn.run(["docker", "update", "--restart", unit.key("DockerRestart"), unit.key("Container")], timeout=60)
    conn.run(root.argv(["rm", "-f", "--", f"{UNIT_DIR}/{name}"]), timeout=30, check=True)


# ---- status -------------------------------------------------------------------------------------------

@dataclass
class OurUnit:
    """One of our unit files on a node; what it records is read only from an enabled one."""

    unit: str
    state: str  # enabled | disabled | ...
    container: str = ""
    plan_hash: str = ""  # recorded in the unit when it was enabled
    release: str = ""

    def as_dict(self) -> dict:
        return {"unit": self.unit, "state": self.state, "container": self.container, "plan_hash": self.plan_hash,
                "release": self.release}


@dataclass
class NodeStatus:
    node: str
    boot: NodeBoot
    our_units: list[OurUnit]
    systemd_why: str = ""

    def as_dict(self) -> dict:
        return {"node": self.node, "systemd": self.boot.systemd, "why": self.systemd_why,
                "docker_enabled": self.boot.engine_enabled, "containerd_enabled": self.boot.containerd_enabled,
                "our_units": [u.as_dict() for u in self.our_units],
                "serving_comes_back": any(i.match is BootMatch.SERVING for i in self.boot.items),
                "comes_back": [i.as_dict() for i in self.boot.items]}


@dataclass
class StatusReport:
    cluster: str
    serving: Release | None
    nodes: list[NodeStatus]
    unreachable: dict[str, str]
    serving_unknown: str = ""  # why which release serves cannot be said; "" when it can

    @property
    def ok(self) -> bool:
        return not self.unreachable and all(n.boot.systemd for n in self.nodes)

    def as_dict(self) -> dict:
        s = self.serving
        return {"cluster": self.cluster, "ok": self.ok,
                "serving": {"release": s.id, "recipe": s.recipe, "plan_hash": s.plan_hash} if s else None,
                "serving_known": not self.serving_unknown,
                "nodes": [n.as_dict() for n in self.nodes], "unreachable": self.unreachable}


def status(inventory: Inventory, recipe: str | None) -> StatusReport:
    with Observation(inventory, what="boot status") as seen:
        looked = look(seen)
    plans = {looked.serving.plan_hash} if looked.serving else set()
    nodes = []
    for n in inventory.ranked:
        if n.name not in looked.facts:
            continue
        units = looked.units(n.name)
        mine = set(our_units(units, cluster_key(inventory), recipe))
        enabled = {u.id: u for u in (units.units if units else ())}
        files = []
        for name, state in (units.our_files if units else ()):
            if name in mine:
                info = enabled.get(name)
                files.append(OurUnit(name, state, *((info.key("Container"), info.key("PlanHash"), info.key("Release"))
                                                    if info else ())))
        nodes.append(NodeStatus(n.name, looked.boot(n.name, plans), files,
                                looked.without_systemd().get(n.name, "")))
    return StatusReport(inventory.cluster, looked.serving, nodes, dict(looked.unreachable), looked.serving_unknown)
