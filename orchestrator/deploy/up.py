"""`up`: a plan executed by the Runner as ordered steps that undo themselves.

    connect → preflight → current state ─┬─ already serving: done, nothing touched
                                         └─ image → secrets → stop previous (kept) → ports → head → rendezvous
                                            → peers → peers joined → forget secrets → ready → log checks

Everything that can fail without consequence (preflight, image sync, ports, secrets) happens before the
serving deployment is stopped. Any failure or interrupt undoes the completed steps in reverse: this run's
containers are removed by ID and the previous containers are renamed back and started again.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config.load import Deployment
from ..http_api.endpoint import Endpoint
from ..render.plan import Plan, build_plan
from ..runner.events import Events, Phase
from ..runner.runner import Runner, StepFailed
from ..transport.group import Cluster
from .context import UpContext, UpOptions
from .current import Action
from .steps_launch import ForgetSecrets, LogChecks, PeersJoined, Ready, Rendezvous, StartRanks
from .steps_prepare import Connect, CurrentState, Preflight, PortsFree, StopPrevious, SyncImage, WriteSecrets

__all__ = ["DeployFailed", "UnpinnedImage", "UpOptions", "UpResult", "up", "plan_steps"]

DeployFailed = StepFailed  # the one error `up` raises: phase, node(s), cause, and what undo did


class UnpinnedImage(Exception):
    """The recipe names no verified image ID (bad input, exit 2)."""


@dataclass
class UpResult:
    endpoint: str
    model: str
    plan_hash: str
    run_id: str
    already_serving: bool = False
    expectations: list = field(default_factory=list)
    sample: str = ""


def launch_steps(ctx: UpContext) -> list:
    """The steps after the current state is known (and is not "already serving")."""
    plan, dep = ctx.plan, ctx.dep
    steps: list = [SyncImage(plan.image_id, plan.image_ref)]
    writer = WriteSecrets(dep.recipe.secrets) if dep.recipe.secrets else None
    if writer:
        steps.append(writer)
    if ctx.decision.action is Action.REPLACE:
        steps.append(StopPrevious())
        if ctx.decision.previous_running:
            steps.append(PortsFree(plan.head.node.name, plan.ports))
    steps.append(StartRanks(Phase.HEAD, [plan.head]))
    if plan.peers:
        steps.append(Rendezvous(plan.head.node.name, plan.head.spec.master_port))
        steps.append(StartRanks(Phase.PEERS, list(plan.peers)))
        steps.append(PeersJoined([p.node.name for p in plan.peers], ctx.dep.inventory.node(ctx.dep.inventory.head).fabric_ip,
                                 plan.head.spec.master_port))
    if writer:
        steps.append(ForgetSecrets(writer))
    steps += [Ready(ctx.endpoint.url), LogChecks()]
    return steps


def plan_steps() -> list:
    """The steps every `up` starts with, read-only: they decide what the rest will be."""
    return [Connect(), Preflight(), CurrentState()]


def up(dep: Deployment, events: Events, opts: UpOptions = UpOptions(), plan: Plan | None = None) -> UpResult:
    recipe = dep.recipe
    if recipe.image.id is None:
        raise UnpinnedImage(f"{dep.recipe_path}: image.id is not set: pin the verified image ID "
                            "(`spark-deploy pin RECIPE --node NODE`)")
    plan = plan or build_plan(dep)
    ctx = UpContext(dep, plan, Cluster(dep.inventory), events, opts,
                    Endpoint(dep.inventory.ranked[0].address, recipe.serve.port))
    runner: Runner[UpContext] = Runner(events, before_undo=ctx.cluster.renew_cancel)
    try:
        runner.run(plan_steps(), ctx)
        if ctx.decision.action is Action.ALREADY_SERVING:
            events.note(f"{recipe.name} plan {plan.plan_hash} is already serving at {ctx.endpoint.url} on every "
                        "rank: nothing changed (--force redeploys)")
            return UpResult(ctx.endpoint.url, recipe.served_name, plan.plan_hash, plan.run_id, already_serving=True)
        runner.run(launch_steps(ctx), ctx)
        return UpResult(ctx.endpoint.url, recipe.served_name, plan.plan_hash, plan.run_id,
                        expectations=ctx.expectations, sample=ctx.sample)
    finally:
        _close(ctx)


def _close(ctx: UpContext) -> None:
    """Stop watching and close every connection (which kills what still runs remotely). A late second
    interrupt here must not replace the run's outcome: each part is retried once past it."""
    for part in (ctx.monitor.stop, ctx.cluster.close):
        for _attempt in range(2):
            try:
                part()
                break
            except KeyboardInterrupt:
                continue
