"""`rollback [RELEASE]`: deploy a recorded release again, exactly as it was, as a release of its own.

The recipe comes from the record (its text, image ID pinned), bound to today's inventory: the plan hash
is the record's unless the inventory changed, which is shown rank by rank before `--yes` is required.
Refused before anything is stopped when a node no longer holds the release's image ID, or its model
cache resolves the revision to another commit. When the release's containers are still kept on every
node they are started again (`docker start`), not re-created.
"""

from __future__ import annotations

import difflib
from dataclasses import dataclass, replace
from functools import partial
from typing import Callable

from ..config.inventory import Inventory
from ..config.load import Deployment
from ..config.source import Document
from ..http_api.endpoint import Endpoint
from ..operation import AuditAction, ClusterState, Operation, OperationRefused, Outcome, Reach
from ..releases.lock import LockError
from ..releases.record import Release
from ..releases.serving import rollback_target
from ..render.plan import Plan, build_plan, new_run_id
from ..runner.events import Events, Phase
from ..runner.runner import StepFailed
from ..transport.group import Cluster, Connector
from .context import UpOptions
from .up import UpResult
from .up import up as run_up
from .restore import recorded_deployment


class RollbackRefused(Exception):
    """Nothing was touched: the target cannot be deployed as recorded."""


class InventoryChanged(RollbackRefused):
    """Today's inventory renders another plan than the record's: shown rank by rank, deployed only when the
    caller confirms (`--yes`). Nothing was touched."""

    def __init__(self, prepared: "RollbackPlan"):
        self.prepared = prepared
        super().__init__("\n".join(prepared.changes) + f"\nrelease {prepared.target.id} would not run as recorded "
                         "on today's inventory (above)")


@dataclass
class RollbackPlan:
    target: Release
    current: Release | None
    dep: Deployment
    plan: Plan
    changes: list[str]  # side-by-side differences when today's inventory changes the plan; [] = identical


def prepare(state: ClusterState, wanted: int | None, inventory_path: str, inventory_doc: Document | None = None,
            run_id: str | None = None) -> RollbackPlan:
    """Choose the target from the cluster's state (read under the lock by the operation this runs in) and
    rebuild its plan on the inventory that state was read with. Read only."""
    if not state.serving_known:
        raise RollbackRefused("cannot tell what serves: " + "; ".join(state.problems()))
    current = state.serving
    try:
        target = rollback_target(state.releases, current, wanted)
    except ValueError as exc:
        raise RollbackRefused(str(exc)) from None
    dep = recorded_deployment(target, state.inventory, inventory_path, inventory_doc)
    plan = build_plan(dep, run_id)
    changes = [] if plan.plan_hash == target.plan_hash else compare(target, plan)
    return RollbackPlan(target, current, dep, plan, changes)


def rollback(inventory: Inventory, inventory_path: str, wanted: int | None, events: Events, *,
             inventory_doc: Document | None = None, connector: Connector | None = None, **how) -> UpResult:
    """`rollback` as one operation: the cluster opened once, the lock taken, the state read under it, the
    target chosen from that state, the release started (roll_back), one audit line. Inside another
    operation on this cluster (`bench --compare`'s restore) it is a part of that one. `how`: roll_back's."""
    options = how.get("options") or UpOptions()
    run_id = new_run_id()
    try:
        with Operation(inventory, events, AuditAction.ROLLBACK, reach=Reach.ALL, run_id=run_id,
                       ttl=max(options.ready_timeout, options.listen_timeout) + 600,
                       cluster_factory=partial(Cluster, connector=connector)) as op:
            try:
                return roll_back(op, wanted, events, inventory_path=inventory_path, inventory_doc=inventory_doc,
                                 run_id=run_id, **how)
            except RollbackRefused as exc:
                op.done(Outcome.REFUSED, str(exc).splitlines()[-1])
                raise
    except OperationRefused as exc:  # said as `up` says it: the phase, the nodes
        raise StepFailed(Phase.CONNECT, str(exc), exc.nodes) from None
    except LockError as exc:
        raise StepFailed(Phase.LOCK, str(exc), [inventory.head]) from None


def roll_back(op: Operation, wanted: int | None, events: Events, *, inventory_path: str,
              inventory_doc: Document | None = None, run_id: str | None = None, yes: bool = False,
              options: UpOptions | None = None, announce: Callable[[RollbackPlan], None] | None = None,
              endpoint_at: Callable[[str, int], Endpoint] = Endpoint) -> UpResult:
    """THE way a recorded release is started again (`rollback`, `maintenance end`, `bench --compare`'s
    restore), as a body of the open operation `op` (the lock held, its state read): the target chosen
    from that state, the same refusals before anything is touched (an inventory that changes the plan
    needs `yes`; `up` itself checks this machine's SSH files and secrets, the image ID and the model
    revision on every node), then `up` with `rollback_of` on the operation's connections: kept containers
    started again, every wait and check, a release of its own, the automatic restore if it fails
    (`options.restore`). `announce` sees the prepared rollback before anything is started (the CLI prints
    it); `endpoint_at` as in `up`; `options`: the up's other options (bounds, restore, skipped checks)."""
    prepared = prepare(op.state, wanted, inventory_path, inventory_doc, run_id)
    if prepared.changes and not yes:
        raise InventoryChanged(prepared)
    if announce is not None:
        announce(prepared)
    opts = replace(options or UpOptions(), rollback_of=prepared.target)
    return run_up(prepared.dep, events, opts, prepared.plan, endpoint_at=endpoint_at, op=op)


def compare(record: Release, plan: Plan) -> list[str]:
    """Per rank, the recorded argv beside today's (labels and names left out: they always differ by run or
    plan)."""
    lines = [f"the inventory changed since release {record.id}: plan {record.plan_hash} (recorded) -> "
             f"{plan.plan_hash} (today)"]
    for rank in record.ranks:
        now = next((l for l in plan.ranks if l.rank == rank.rank), None)
        before, after = _unlabelled(rank.argv), _unlabelled(list(now.argv)) if now else []
        diff = [d for d in difflib.ndiff(before, after) if d[:1] in "+-"]
        node_now = now.node.name if now else "(no such rank today)"
        lines.append(f"  rank {rank.rank}: {rank.node} -> {node_now}")
        width = max((len(d) for d in diff), default=0)
        olds = [d[2:] for d in diff if d.startswith("- ")]
        news = [d[2:] for d in diff if d.startswith("+ ")]
        for i in range(max(len(olds), len(news))):
            left = olds[i] if i < len(olds) else ""
            right = news[i] if i < len(news) else ""
            lines.append(f"    {left:<{min(width, 60)}} | {right}")
    return lines


def _unlabelled(argv: list[str]) -> list[str]:
    """The argv without its labels and its container name: both carry the run or the plan hash, so they
    always differ between two plans and say nothing about what changed."""
    out, skip = [], False
    for arg in argv:
        if skip:
            skip = False
            continue
        if arg in ("--label", "--name"):
            skip = True
            continue
        out.append(arg)
    return out
