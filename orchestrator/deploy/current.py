"""What to do with what already runs: a pure decision over the containers found on every node.

Inputs are inspect results (ours and foreign), so the table is unit-tested without Docker.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from ..docker_cli.containers import Container
from ..render.plan import Plan


class Action(StrEnum):
    FRESH = "fresh"  # nothing of this recipe on the nodes
    ALREADY_SERVING = "already serving"  # every rank runs this exact plan: change nothing
    REPLACE = "replace"  # stop the current containers (kept), start the plan's


@dataclass
class Decision:
    action: Action
    reason: str
    previous: dict[str, list[Container]] = field(default_factory=dict)  # to stop and keep, per node
    clashes: list[tuple[str, Container]] = field(default_factory=list)  # foreign containers holding our names

    @property
    def previous_running(self) -> bool:
        return any(c.running for cs in self.previous.values() for c in cs)


def decide(plan: Plan, named: dict[str, list[Container]], force: bool) -> Decision:
    """`named`: per node, every container holding one of the plan's container names, whoever made it.

    Foreign holders (no `spark-deploy.managed` label) are clashes: never touched, always an error. Ours
    are the current deployment: identical plan on every rank and running -> already serving (unless
    --force); anything else -> replace."""
    clashes = [(node, c) for node, cs in named.items() for c in cs if c.ours is None]
    current = {node: [c for c in cs if c.ours is not None] for node, cs in named.items()}
    current = {node: cs for node, cs in current.items() if cs}
    if clashes:
        return Decision(Action.FRESH, "name clash", {}, clashes)
    if not current:
        return Decision(Action.FRESH, "no container of this recipe on any node")
    per_rank = {launch.rank: _holder(current, launch.node.name, launch.container) for launch in plan.ranks}
    same = all(c is not None and c.running and c.ours.plan_hash == plan.plan_hash for c in per_rank.values())
    if same and not force:
        return Decision(Action.ALREADY_SERVING, f"plan {plan.plan_hash} runs on every rank", current)
    if same:
        reason = "--force"
    else:
        reason = "; ".join(_why(plan, rank, c) for rank, c in per_rank.items() if _why(plan, rank, c))
    return Decision(Action.REPLACE, reason, current)


def _holder(current: dict[str, list[Container]], node: str, name: str) -> Container | None:
    return next((c for c in current.get(node, []) if c.name == name), None)


def _why(plan: Plan, rank: int, found: Container | None) -> str:
    name = plan.ranks[rank].container
    if found is None:
        return f"rank {rank} ({name}) missing"
    if not found.running:
        return f"rank {rank} {found.status}"
    if found.ours.plan_hash != plan.plan_hash:
        return f"rank {rank} runs plan {found.ours.plan_hash or 'unknown'}"
    return ""
