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

from ..config.load import Deployment, load_inventory
from ..http_api.endpoint import Endpoint
from ..operation import ClusterState, Observation, Reach
from ..releases.record import Release
from ..releases.serving import rollback_target
from ..render.plan import Plan, build_plan
from ..runner.events import Events
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


def prepare(inventory_path: str, wanted: int | None, state: ClusterState | None = None, *,
            connector: Connector | None = None) -> RollbackPlan:
    """Choose the target from the cluster's state (read now, every node, unless an enclosing operation
    passes the one it read) and rebuild its plan. Read only."""
    if state is None:
        inventory, _ = load_inventory(inventory_path)
        with Observation(inventory, reach=Reach.ALL, what="rollback (choosing the release)",
                         cluster_factory=partial(Cluster, connector=connector)) as seen:
            state = seen.state
    if not state.serving_known:
        raise RollbackRefused("cannot tell what serves: " + "; ".join(state.problems()))
    current = state.serving
    try:
        target = rollback_target(state.releases, current, wanted)
    except ValueError as exc:
        raise RollbackRefused(str(exc)) from None
    dep = recorded_deployment(target, inventory_path)
    plan = build_plan(dep)
    changes = [] if plan.plan_hash == target.plan_hash else compare(target, plan)
    return RollbackPlan(target, current, dep, plan, changes)


def roll_back(inventory_path: str, wanted: int | None, events: Events, *, yes: bool = False,
              options: UpOptions | None = None, state: ClusterState | None = None,
              announce: Callable[[RollbackPlan], None] | None = None, connector: Connector | None = None,
              endpoint_at: Callable[[str, int], Endpoint] = Endpoint) -> UpResult:
    """THE way a recorded release is started again (`rollback`, `maintenance end`, `bench --compare`'s
    restore): the target chosen from the state, the same refusals before anything is touched (an inventory
    that changes the plan needs `yes`; `up` itself checks this machine's SSH files and secrets, the image ID
    and the model revision on every node), then `up` with `rollback_of`: kept containers started again,
    every wait and check, a release of its own, the automatic restore if it fails (`options.restore`).
    `announce` sees the prepared rollback before anything is started (the CLI prints it); `connector` and
    `endpoint_at` as in `up`; `options`: the up's other options (bounds, restore, skipped checks)."""
    prepared = prepare(inventory_path, wanted, state, connector=connector)
    if prepared.changes and not yes:
        raise InventoryChanged(prepared)
    if announce is not None:
        announce(prepared)
    opts = replace(options or UpOptions(), rollback_of=prepared.target)
    return run_up(prepared.dep, events, opts, prepared.plan, connector=connector, endpoint_at=endpoint_at)


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
