"""What to do with what already runs: a pure decision over the containers found on every node.

Inputs are inspect results (ours and foreign), so the table is unit-tested without Docker. Ours are told
apart by labels (cluster, recipe, rank, plan hash), never by name: names carry the plan
(`sd-RECIPE-rN-HASH8`) and are never changed, so the previous release's containers are simply stopped and
a container of an older spark-deploy (`sd-RECIPE-rN`, or kept as `sd-RECIPE-rN-RUN`) is just another name.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from ..docker_cli.containers import Container, current_of
from ..releases.serving import serving_plans
from ..render.plan import Plan


class Action(StrEnum):
    FRESH = "fresh"  # nothing of this recipe runs on the nodes
    ALREADY_SERVING = "already serving"  # every rank runs this exact plan: change nothing
    REPLACE = "replace"  # stop the running containers (kept), start the plan's


@dataclass
class Decision:
    action: Action
    reason: str
    previous: dict[str, list[Container]] = field(default_factory=dict)  # running ones to stop and keep, per node
    clashes: list[tuple[str, Container]] = field(default_factory=list)  # foreign containers holding our names
    names_taken: bool = False  # a container of ours (the same plan, kept or serving) holds a plan's name

    @property
    def previous_running(self) -> bool:
        return any(c.running for cs in self.previous.values() for c in cs)


def decide(plan: Plan, found: dict[str, list[Container]], force: bool) -> Decision:
    """`found`: per node, our containers of this cluster's recipe (any state, any name) and every container
    holding one of the plan's names, whoever made it.

    Foreign holders of a name (no `spark-deploy.managed` label) are clashes: never touched, always an error.
    Ours that run are the current deployment: this plan serving (serving_plans: on every rank) -> already serving (unless
    --redeploy); anything running otherwise -> replace; nothing running -> fresh. Stopped ones (previous
    releases, kept) are left as they are."""
    names = {l.node.name: l.container for l in plan.ranks}
    clashes = [(node, c) for node, cs in found.items() for c in cs if c.ours is None and c.name == names.get(node)]
    mine = {node: [c for c in cs if _of(plan, c)] for node, cs in found.items()}
    taken = any(c.name == names.get(node) for node, cs in mine.items() for c in cs)
    current = {node: [c for c in cs if c.running] for node, cs in mine.items()}
    current = {node: cs for node, cs in current.items() if cs}
    if clashes:
        return Decision(Action.FRESH, "name clash", {}, clashes, taken)
    if not current:
        return Decision(Action.FRESH, "no container of this recipe runs on any node", names_taken=taken)
    per_rank = {launch.rank: _holder(current, launch.node.name, launch.rank, plan.plan_hash) for launch in plan.ranks}
    # "this plan serves" is the one rule of releases/serving.py (its plan runs on every rank of its world); the
    # plan hash covers the placement, so the rank on each node is the plan's
    same = plan.plan_hash in serving_plans(current)
    if same and not force:
        return Decision(Action.ALREADY_SERVING, f"plan {plan.plan_hash} runs on every rank", current,
                        names_taken=taken)
    if same:
        reason = "--redeploy"
    else:
        last = {l.rank: next((c for c in current_of(mine.get(l.node.name, [])) if c.ours.rank == l.rank), None)
                for l in plan.ranks}
        reason = "; ".join(w for w in (_why(plan, rank, c, last[rank]) for rank, c in per_rank.items()) if w)
    return Decision(Action.REPLACE, reason, current, names_taken=taken)


def _of(plan: Plan, c: Container) -> bool:
    """Ours, this recipe, this cluster (or a spark-deploy too old to set the cluster label)."""
    return c.ours is not None and c.ours.cluster in (plan.cluster, "") and c.ours.recipe == plan.recipe


def _holder(current: dict[str, list[Container]], node: str, rank: int, plan_hash: str) -> Container | None:
    """The running container of this rank on the node, this plan's first."""
    ranked = [c for c in current.get(node, []) if c.ours.rank == rank]
    return next((c for c in ranked if c.ours.plan_hash == plan_hash), ranked[0] if ranked else None)


def _why(plan: Plan, rank: int, found: Container | None, last: Container | None) -> str:
    """Why the rank is not this plan running: `found` runs there; `last` is the container of ours that ran
    there last, when none runs (an exited one)."""
    if found is None:
        return f"rank {rank} {last.status}" if last is not None else f"rank {rank} ({plan.ranks[rank].container}) missing"
    if found.ours.plan_hash != plan.plan_hash:
        return f"rank {rank} runs plan {found.ours.plan_hash or 'unknown'}"
    return ""
