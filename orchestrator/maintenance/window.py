"""`maintenance begin` and `maintenance verify`: write the baseline, and compare the nodes with it.

`begin` runs under the deploy lock: preflight (its failures are recorded in the baseline and make the
command exit 1, but the baseline is written anyway — before a window an operator wants it most when
something is already wrong), the facts of every node, optionally the serving release stopped (kept),
the baseline on every node and one audit line. `verify` is read only.
"""

from __future__ import annotations

import time
from functools import partial
from dataclasses import dataclass, field

from .. import preflight
from ..config.inventory import Inventory
from ..config.load import Deployment, bind_recipe_text, load_inventory
from ..config.source import Document
from ..deploy.restore import recorded_deployment
from ..fabric import baseline as fabric_store
from ..fabric.judge import Judgment, judge as judge_fabric
from ..fabric.measure import MeasureError, measure
from ..preflight.registry import CheckSpec
from ..preflight.run import Report
from ..releases import audit
from ..releases import store as release_store
from ..releases.record import Release, ReleaseOutcome, who
from ..render.plan import build_plan
from ..runner.events import Events
from ..operation import AuditAction, ClusterState, Observation, Operation, OperationRefused, Reach
from ..transport.group import Cluster, Connector
from ..window import store
from . import collect
from ..window.baseline import Baseline, NodeFacts, said
from .diff import Drift, compare
from .stop import StopOutcome, StopResult, stop_release

VERIFY_SECONDS = 3.0  # per link and direction with `verify --fabric` (preflight --fabric measures as long)

class MaintenanceError(Exception):
    """A failure (exit 1); the message says where and why."""


class MaintenanceInput(Exception):
    """A request that cannot be met as asked (exit 2): no window, another recipe, a window already open."""


@dataclass
class BeginResult:
    baseline: Baseline
    report: Report
    stop: StopResult | None = None
    not_written: dict[str, str] = field(default_factory=dict)  # node -> why the baseline is not there
    replaced: Baseline | None = None  # --force: the open window this one replaced

    @property
    def ok(self) -> bool:
        return self.baseline.preflight_ok and not self.not_written and (self.stop is None or self.stop.ok)


@dataclass
class VerifyResult:
    baseline: Baseline
    now: dict[str, NodeFacts]
    drift: Drift
    serving_now: Release | None  # judged from the running containers
    problems: dict[str, str] = field(default_factory=dict)  # nodes whose copy of the baseline was not used
    fabric: Judgment | None = None  # with --fabric: a short run against the fabric's baseline (docs/fabric.md)
    fabric_note: str = ""  # with --fabric: why it was not judged (no baseline, not measured)

    @property
    def serves_again(self) -> bool:
        return self.serving_now is not None and self.serving_now.plan_hash == self.baseline.plan_hash


def _summary(report: Report) -> list[str]:
    return [f"{v.name} ({', '.join(v.failed_nodes())}): " + "; ".join(v.cells[n].value for n in v.failed_nodes())
            for v in report.failed()]


def begin(dep: Deployment, events: Events, reason: str = "", stop: bool = False, force: bool = False, *,
          connector: Connector | None = None, checks: list[CheckSpec] | None = None) -> BeginResult:
    """The head must answer (the lock and the baseline's newest copy); an unreachable peer is named in the
    baseline's facts, not a refusal: a window is often opened because a node is in trouble. `connector`
    and `checks` (default: every registered check) are the seams the in-memory unit tests use."""
    with Operation(dep.inventory, events, AuditAction.MAINTENANCE_BEGIN, reach=Reach.HEAD,
                   cluster_factory=partial(Cluster, connector=connector)) as op:
        return _begin_locked(dep, op, reason, stop, force, preflight.select() if checks is None else checks)


def _begin_locked(dep: Deployment, op: Operation, reason: str, stop: bool, force: bool,
                  checks: list[CheckSpec]) -> BeginResult:
    inventory, cluster, conns, unreachable, events = dep.inventory, op.cluster, op.alive, op.unreachable, op.events
    state = op.state
    open_window = state.window
    if open_window and not force:
        raise MaintenanceInput(f"refused (window-open): a maintenance window is already open on {inventory.cluster}: "
                               f"{open_window.describe()}; `maintenance end` closes it, `maintenance begin --force` "
                               "overrides this refusal and replaces its baseline")
    if stop and not state.serving_known:  # stopping the ranks that answer would leave the others alone
        why = {**state.unread, **state.unreachable}
        missing = [n.name for n in inventory.ranked if n.name not in state.containers]
        raise MaintenanceError("--stop stops every rank, so it needs every node's containers read: "
                               + "; ".join(f"{n}: {why.get(n, 'not read')}" for n in missing)
                               + "; nothing was stopped and no window was opened: whatever served still serves")
    serving = state.serving if state.serving_known else None
    if not state.serving_known:  # never recorded as "nothing served": `end` would then bring nothing back
        events.warn("which release serves is unknown (" + "; ".join(state.problems()) + "): the baseline records "
                    "none, so `maintenance end` will not bring one back; `maintenance begin --force` once every "
                    "node answers records it")
    if serving is not None and serving.recipe != dep.recipe.name:
        raise MaintenanceInput(f"release {serving.id} of recipe {serving.recipe!r} serves on {inventory.cluster}, not "
                               f"{dep.recipe.name!r}: name that recipe")
    fact_dep = recorded_deployment(serving, dep.inventory, dep.inventory_path, dep.inventory_doc) if serving else dep
    plan = build_plan(fact_dep)
    # every check runs: the serving release's own ports and memory count as what `up` would free first
    # (facts/replaced.py), so nothing is skipped while it serves
    skipped: dict[str, str] = {}
    report = preflight.run_checks(fact_dep, plan, cluster, [c for c in checks if c.name not in skipped])
    serving_plan = serving.plan_hash if serving else None
    facts = collect.collect(cluster, conns, unreachable, fact_dep, plan, serving_plan)
    stopped = None
    if stop and serving is None:
        events.warn("--stop: nothing serves, nothing to stop")
    elif stop:
        stopped = stop_release(cluster, inventory.head, serving, state.containers,
                               {**state.unread, **state.unreachable}, events)
        if stopped.stopped and stopped.outcome is StopOutcome.STOPPED:
            _mark_stopped(cluster, inventory, serving, conns, events, reason)
        # what comes back on boot is what the nodes go into the window with: read again after the stop
        after = collect.collect(cluster, conns, unreachable, fact_dep, plan, serving_plan,
                                names=list(collect.BOOT_FACTS))
        for node, f in after.items():
            _take_boot(facts[node], f)
    now = time.time()
    baseline = Baseline(
        cluster=inventory.cluster, recipe=fact_dep.recipe.name, recipe_text=fact_dep.text(),
        reason=reason, by=who(), command=audit.command_line(), opened_at=now, updated_at=now,
        release=serving.id if serving else None, plan_hash=serving_plan, image_id=plan.image_id,
        preflight_ok=report.ok(), preflight_failed=_summary(report),
        preflight_skipped=[f"{name}: {why}" for name, why in skipped.items()], nodes=facts,
        stopped=stopped.stopped if stopped else [])
    not_written = store.write(cluster, inventory, baseline, conns)
    outcome = "opened" if report.ok() and not not_written and (stopped is None or stopped.ok) else "opened with problems"
    op.done(outcome, f"{said(reason)}; " + ("preflight ok" if report.ok() else
                                           f"preflight failed: {', '.join(v.name for v in report.failed())}")
            + (f"; stopped {len(stopped.stopped)} container(s) of release {serving.id}" if stopped and serving else "")
            + (f"; replaced the open window of {time.strftime('%Y-%m-%d %H:%M:%S', time.gmtime(open_window.opened_at))}"
               if open_window else ""),
            release=baseline.release, reason=reason, opened_at=now,
            nodes={**not_written, **(stopped.failed if stopped else {})})
    return BeginResult(baseline, report, stopped, not_written, open_window)


def _take_boot(into: NodeFacts, seen: NodeFacts) -> None:
    for name in ("systemd", "units_enabled", "restart_policies", "on_boot"):
        setattr(into, name, getattr(seen, name))
    for fact_name in collect.BOOT_FACTS:
        into.errors.pop(fact_name, None)
        if fact_name in seen.errors:
            into.errors[fact_name] = seen.errors[fact_name]


def _mark_stopped(cluster: Cluster, inventory, release: Release, conns, events: Events, reason: str) -> None:
    try:
        release_store.write_release(cluster, inventory, release.touch(
            outcome=ReleaseOutcome.STOPPED, cause=f"stopped for a maintenance window ({reason or 'no reason given'})"),
            conns)
    except Exception as exc:  # noqa: BLE001 - the containers are stopped either way; the record is named
        events.warn(f"could not record release {release.id} as stopped: {exc}")


def baseline_deployment(baseline: Baseline, inventory: Inventory, inventory_path: str,
                        inventory_doc: Document | None = None) -> Deployment:
    """The recipe the baseline judged, bound to an inventory already parsed (from its text: no file
    written, the inventory not read again)."""
    return bind_recipe_text(baseline.recipe_text, f"the baseline's recipe {baseline.recipe} (window opened "
                            f"{time.strftime('%Y-%m-%d %H:%M', time.gmtime(baseline.opened_at))})",
                            inventory, inventory_path, inventory_doc)


def open_window(state: ClusterState, recipe: str | None) -> tuple[Baseline, dict[str, str]]:
    """The open window's baseline as the state read it, or MaintenanceInput saying there is none."""
    found, inventory = state.window_found, state.inventory
    if state.window is None:
        last = f" (the last one closed {time.strftime('%Y-%m-%d %H:%M:%S UTC', time.gmtime(found.baseline.closed_at))})" \
            if found.baseline and found.baseline.closed_at else ""
        raise MaintenanceInput(f"no maintenance window is open on {inventory.cluster}{last}: "
                               "`spark-deploy maintenance begin RECIPE` opens one")
    if recipe is not None and recipe != found.baseline.recipe:
        raise MaintenanceInput(f"the open window is for recipe {found.baseline.recipe!r}, not {recipe!r}")
    return found.baseline, found.problems


def verify(inventory_path: str, recipe: str | None = None, fabric_min: float | None = None) -> VerifyResult:
    """With `fabric_min`, the fabric is measured too (a few seconds per link and direction) and judged
    against the baseline `fabric test --save` kept: a direction below that fraction of it is a drop."""
    inventory, idoc = load_inventory(inventory_path)
    try:
        with Observation(inventory, what="maintenance verify") as seen:
            result = verify_open(seen, inventory_path, recipe, idoc)
            if fabric_min is not None:
                _fabric(seen, result, fabric_min)
            return result
    except OperationRefused as exc:
        raise MaintenanceError(str(exc)) from exc


def _fabric(op: Operation, result: VerifyResult, fabric_min: float) -> None:
    found = fabric_store.read(op.cluster, op.inventory, op.alive)
    if found.baseline is None:
        result.fabric_note = "no fabric baseline: `spark-deploy fabric test --save` records one"
        return
    try:
        now = measure(op.cluster, op.inventory, op.alive, VERIFY_SECONDS, found.baseline.method)
    except MeasureError as exc:
        result.fabric_note = f"the fabric could not be measured: {exc}"
        return
    result.fabric = judge_fabric(found.baseline, now, fabric_min)


def verify_open(op: Operation, inventory_path: str, recipe: str | None,
                inventory_doc: Document | None = None) -> VerifyResult:
    """Verify on an open operation (its state as read, its connections for the facts, its inventory)."""
    baseline, problems = open_window(op.state, recipe)
    dep = baseline_deployment(baseline, op.inventory, inventory_path, inventory_doc)
    plan = build_plan(dep)
    now = collect.collect(op.cluster, op.alive, op.unreachable, dep, plan, baseline.plan_hash)
    serving = op.state.serving if op.state.serving_known else None
    return VerifyResult(baseline, now, compare(baseline.nodes, now), serving, problems)
