"""`up`: a plan executed by the Runner as ordered steps that undo themselves, as one release.

    connect → lock → preflight → current state ─┬─ already serving: done, nothing touched
                                                └─ release record → image → secrets → stop previous (kept)
                                                   → ports → head → rendezvous → peers → peers joined
                                                   → forget secrets → ready → log checks
                                                   → after ready (facts) → acceptance (unless --no-accept)

Everything that can fail without consequence (preflight, image sync, ports, secrets) happens before the
serving release is stopped. Any failure or interrupt undoes the completed steps in reverse (this run's
containers removed by ID, the previous ones left stopped under their own names), then the previous release is started
again with every wait `up` has (deploy/restore.py) unless --no-restore. The release's outcome is written
to every node, and one audit line.
"""

from __future__ import annotations

import os
import shlex
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from typing import Callable, Iterator

from ..config.load import Deployment
from ..config.local_checks import local_problems
from ..config.source import ConfigError, Document
from ..config.vllm_flags import flag_issues, judged_against
from ..http_api.endpoint import Endpoint
from ..operation.operation import AuditAction, Operation, OperationRefused, Reach, enclosing
from ..releases.identity import IdentityMismatch
from ..releases.keys import cluster_key
from ..releases.lock import LockError
from ..render.plan import Plan, build_plan
from ..runner.events import Events, Phase
from ..runner.runner import Runner, StepFailed, classify
from ..transport.group import Cluster, Connector
from ..releases.record import ReleaseOutcome
from . import boot, kv_report
from .context import UpContext, UpOptions
from .current import Action
from .restore import RestoreResult, StartKept, restore_previous, stop_again
from .rollback_check import CheckRollback
from ..acceptance.problems import acceptance_problems
from .steps_accept import accept_steps
from .steps_release import OpenRelease, TakeLock, finish
from .steps_model import SyncModel
from .steps_launch import ForgetSecrets, LogChecks, PeersJoined, Ready, Rendezvous, StartRanks
from .steps_prepare import (Connect, CurrentState, MemoryFree, Preflight, PortsFree, StopPrevious, SyncImage,
                            WriteSecrets)

__all__ = ["DeployFailed", "UnpinnedImage", "UpOptions", "UpResult", "up", "plan_steps"]

UNLOCK_BOUND = 35.0  # seconds: past the unlock script's own 30 s timeout

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
    release: int | None = None
    replaced: int | None = None
    acceptance: list = field(default_factory=list)  # acceptance.Result per check
    after_ready: dict | None = None


def launch_steps(ctx: UpContext) -> list:
    """The steps after the current state is known (and is not "already serving")."""
    plan, dep = ctx.plan, ctx.dep
    steps: list = [OpenRelease(), SyncImage(plan.image_id, plan.image_ref)]
    reuse = ctx.reuse  # a rollback whose kept containers are all there: `docker start`, not `docker run`
    writer = WriteSecrets(dep.recipe.secrets) if dep.recipe.secrets and not reuse else None
    if writer:
        steps.append(writer)
    if ctx.decision.action is Action.REPLACE:
        ctx.stop_step = StopPrevious()
        steps.append(ctx.stop_step)
        if ctx.decision.previous_running:
            steps += [PortsFree(plan.head.node.name, plan.ports), MemoryFree()]

    def start(phase: Phase, launches: list):
        if reuse:
            return StartKept(phase, [reuse[l.node.name] for l in launches], undo_stops=True)
        return StartRanks(phase, launches)

    steps.append(start(Phase.HEAD, [plan.head]))
    if plan.peers:
        steps.append(Rendezvous(plan.head.node.name, plan.head.spec.master_port))
        steps.append(start(Phase.PEERS, list(plan.peers)))
        steps.append(PeersJoined([p.node.name for p in plan.peers], ctx.dep.inventory.node(ctx.dep.inventory.head).fabric_ip,
                                 plan.head.spec.master_port))
    if writer:
        steps.append(ForgetSecrets(writer))
    steps += [Ready(ctx.endpoint.url), LogChecks()]
    return steps + accept_steps(ctx)


def plan_steps(ctx: UpContext) -> list:
    """The steps every `up` starts with, read-only (the lock aside): they decide what the rest will be."""
    joined = [] if ctx.op_owned else [Connect()]  # its own operation connected under the `connect` phase
    steps = [*joined, TakeLock(), *([SyncModel()] if ctx.opts.sync_model else []), Preflight()]
    if ctx.opts.rollback_of is not None:
        steps.append(CheckRollback())  # rollback's own refusals, before anything is stopped
    return steps + [CurrentState()]


def up(dep: Deployment, events: Events, opts: UpOptions = UpOptions(), plan: Plan | None = None, *,
       connector: Connector | None = None, endpoint_at: Callable[[str, int], Endpoint] = Endpoint,
       op: Operation | None = None) -> UpResult:
    """Every release starts here — `up`, `rollback`, `maintenance end`, `bench --compare`, `demo` — so its
    preconditions hold wherever a release is started: this machine's SSH files and the recipe's secrets
    (ConfigError, exit 2, before any connection), `vllm.extra` against vLLM's table (the verdict
    `validate` and `render` give; `--skip-check vllm-flags` leaves it out), a pinned image (UnpinnedImage).
    `connector` and `endpoint_at` make the nodes' connections and the head's API (default: SSH and HTTP).

    It always runs as the body of an operation: `op`, or the one open on this cluster (then its outcome is a
    part of that operation's audit line), else its own `up` operation — opened, locked and read once under
    the `connect` phase, held from the first read to the last audit line (boot's follow-up included)."""
    recipe = dep.recipe
    problems = local_problems(dep, os.environ) + acceptance_problems(dep)
    if "vllm-flags" not in opts.skip_checks:  # the one override: the node's own parser is then the judge
        problems += flag_issues(recipe, dep.recipe_doc or Document(dep.recipe_path, None))
    if problems:
        raise ConfigError(problems)
    events.note(f"vLLM flags judged against {judged_against(recipe)}" if "vllm-flags" not in opts.skip_checks
                else "vLLM flags not judged before start (--skip-check vllm-flags): the engine's parser judges them")
    if recipe.image.id is None:
        raise UnpinnedImage(f"{dep.recipe_path}: image.id is not set: pin the verified image ID "
                            "(`spark-deploy pin RECIPE --node NODE`)")
    plan = plan or build_plan(dep)
    op = op or enclosing(dep.inventory)
    if op is not None:
        return _serve(dep, events, opts, plan, op, endpoint_at, connector)
    with _own_operation(dep, events, opts, plan, connector) as own:
        return _serve(dep, events, opts, plan, own, endpoint_at, connector)


@contextmanager
def _own_operation(dep: Deployment, events: Events, opts: UpOptions, plan: Plan,
                   connector: Connector | None) -> Iterator[Operation]:
    """`up`'s own operation: every rank must answer (Reach.ALL), the lock is held past the longest wait and
    names this run (a taker of a stale lock removes what it created). A refusal is the `connect` (or `lock`)
    phase's failure: nothing was read, locked or changed, so nothing is undone or restored."""
    stack = ExitStack()
    operation = Operation(dep.inventory, events, AuditAction.UP, reach=Reach.ALL, run_id=plan.run_id,
                          ttl=max(opts.ready_timeout, opts.listen_timeout) + 600,
                          cluster_factory=lambda inventory: Cluster(inventory, connector=connector))
    try:
        with events.phase(Phase.CONNECT, "host keys verified, the cluster's identity, the deploy lock, one "
                                         "reading per node"):
            stack.enter_context(operation)
    except (OperationRefused, IdentityMismatch) as exc:  # nodes that did not answer, or of two clusters
        raise StepFailed(Phase.CONNECT, str(exc), exc.nodes) from None
    except LockError as exc:
        raise StepFailed(Phase.LOCK, str(exc), [dep.inventory.head]) from None
    except BaseException as exc:  # noqa: BLE001 - an interrupt, a transport error: named as the phase's failure
        raise classify(Phase.CONNECT, exc) from exc
    with stack:
        events.note(f"{len(dep.inventory.ranked)} node(s): " + ", ".join(c.name for c in operation.cluster.nodes))
        yield operation


def _serve(dep: Deployment, events: Events, opts: UpOptions, plan: Plan, op: Operation,
           endpoint_at: Callable[[str, int], Endpoint], connector: Connector | None) -> UpResult:
    """The release itself, inside `op`: the plan's steps, the undo and restore on failure, the record."""
    recipe = dep.recipe
    ctx = UpContext(dep, plan.for_cluster(cluster_key(dep.inventory)), op.cluster, events, opts,
                    endpoint_at(dep.inventory.ranked[0].address, recipe.serve.port), endpoint_at=endpoint_at, op=op,
                    op_owned=op.outer is None and op.action == AuditAction.UP and opts.rollback_of is None)
    runner: Runner[UpContext] = Runner(events, before_undo=ctx.cluster.renew_cancel,
                                       announce=lambda error: _announce(ctx, error))
    behind: dict[str, str] = {}
    try:
        runner.run(plan_steps(ctx), ctx)
        if ctx.decision.action is Action.ALREADY_SERVING:
            events.note(f"{recipe.name} plan {plan.plan_hash} is already serving at {ctx.endpoint.url} on every "
                        "rank: nothing changed (--redeploy deploys it again)")
            finish(ctx, "already serving")
            return UpResult(ctx.endpoint.url, recipe.served_name, plan.plan_hash, plan.run_id, already_serving=True)
        runner.run(launch_steps(ctx), ctx)
    except StepFailed as failure:
        try:
            _after_failure(ctx, failure)
        except KeyboardInterrupt:  # a late interrupt between the restore's parts: the failure stands
            failure.undo_notes.append("interrupted again after the undo: `spark-deploy status` shows what runs")
        raise
    else:
        kv = _kv_cache(ctx)
        finish(ctx, ReleaseOutcome.SERVING, log_checks=[_check(r) for r in ctx.expectations], kv_cache=kv,
               **_facts(ctx))
        behind = _boot_behind(ctx)
        result = UpResult(ctx.endpoint.url, recipe.served_name, plan.plan_hash, plan.run_id,
                          expectations=ctx.expectations, sample=ctx.sample,
                          release=ctx.release.id if ctx.release else None,
                          replaced=ctx.replaces.id if ctx.replaces else None,
                          acceptance=ctx.acceptance, after_ready=ctx.after_ready)
    finally:
        _close(ctx)
    if behind:  # still inside the operation: `boot enable` is a part of it (the lock it holds, its audit line)
        boot.follow(dep, events, behind, connector)
    return result


def _boot_behind(ctx: UpContext) -> dict[str, str]:
    """Nodes whose boot unit of this recipe brings back an earlier release (a reboot must bring back this one),
    from the boot facts preflight gathered before anything changed (the units are not touched by `up`)."""
    if ctx.release is None or ctx.look is None:
        return {}
    return boot.units_behind(ctx.look.facts, ctx.dep.inventory, ctx.dep.recipe.name, ctx.release.id)


def _kv_cache(ctx: UpContext) -> dict | None:
    """model-fit's prediction (from the facts preflight gathered) against the head's logged KV cache size."""
    head = ctx.plan.head.node.name
    lines = [line for w in ctx.monitor.watches.values() if w.conn.name == head for line in w.lines]
    kv = kv_report.record(ctx.look.facts if ctx.look else {}, ctx.dep, lines)
    if kv:
        ctx.events.note(f"KV cache tokens: {kv_report.text(kv)}")
    return kv


def _check(result) -> dict:
    return {"name": result.name, "status": result.status, "per_node": result.per_node, "detail": result.detail}


def _facts(ctx: UpContext) -> dict:
    """The release record's after-ready facts and acceptance results, once they were gathered."""
    out: dict = {}
    if ctx.after_ready is not None:
        out["after_ready"] = ctx.after_ready
    if ctx.fingerprint is not None:
        out["engine"] = ctx.fingerprint
    if ctx.acceptance:
        out["acceptance"] = [r.as_dict() for r in ctx.acceptance]
    return out


def _announce(ctx: UpContext, error: StepFailed) -> None:
    """On an interrupt, before the undo: one line saying what happens next (the undo, then the restore,
    takes seconds), and that a second Ctrl-C stops the restore."""
    if not error.interrupted:
        return
    new = f"release {ctx.release.id}" if ctx.release is not None else "this run"
    previous = f"release {ctx.replaces.id}" if ctx.replaces is not None else "what ran before"
    stop = ctx.stop_step
    if stop is None or not stop.touched:
        then = f"; {previous} was not stopped: nothing to restore" if ctx.replaces is not None else ""
        ctx.events.warn(f"interrupted: undoing {new}{then}")
    elif not any(c.running for cs in ctx.decision.previous.values() for c in cs):  # what the undo's `ran` will be
        ctx.events.warn(f"interrupted: undoing {new}; nothing ran before it: nothing to restore")
    elif not ctx.opts.restore:
        ctx.events.warn(f"interrupted: undoing {new}; {previous} is left stopped (--no-restore)")
    else:
        ctx.events.warn(f"interrupted: undoing {new}, then starting {previous} again — Ctrl-C again to stop "
                        "the restore")


def _repair(ctx: UpContext) -> str:
    """The one command that serves the previous release again from the state an interrupted restore leaves."""
    inventory = shlex.quote(str(ctx.dep.inventory_path))
    if ctx.replaces is not None:
        return f"spark-deploy rollback {ctx.replaces.id} -i {inventory}"
    sets = "".join(f" --set {shlex.quote(o)}" for o in ctx.dep.overrides)
    return f"spark-deploy up {shlex.quote(str(ctx.dep.recipe_path))}{sets} -i {inventory}"


def _restore_interrupted(ctx: UpContext, failure: StepFailed, ran: list, fields: dict) -> None:
    """A second interrupt stopped the restore: stop again what it had started (bounded), so that nothing is
    left running half-way, record the previous release as stopped (not serving), and name one command that
    serves it again."""
    previous = f"release {ctx.replaces.id}" if ctx.replaces is not None else "the previous deployment"
    ctx.events.warn(f"interrupted again: stopping {previous}'s containers (kept) — the restore is abandoned")
    try:
        missed = stop_again(ctx, ran)
    except KeyboardInterrupt:
        missed = sorted({node for node, _c in ran})
    failure.restore_failed = "interrupted"
    if missed:
        failure.undo_notes.append(f"RESTORE INTERRUPTED: {previous}'s containers may still run half-started on "
                                  f"{', '.join(missed)}; nothing serves (`spark-deploy status` shows what runs)")
    else:
        failure.undo_notes.append(f"RESTORE INTERRUPTED: {previous}'s containers are stopped again (kept): "
                                  "nothing serves now")
    _left_stopped(ctx, failure, previous, fields)


def _not_restored(ctx: UpContext, failure: StepFailed, fields: dict) -> None:
    """A second interrupt stopped the undo itself: no restore is started (what the undo left is listed above)."""
    previous = f"release {ctx.replaces.id}" if ctx.replaces is not None else "the previous deployment"
    failure.restore_failed = "interrupted"
    failure.undo_notes.append(f"NOT RESTORED (interrupted again during the undo): {previous} is left stopped "
                              "(kept); nothing serves")
    _left_stopped(ctx, failure, previous, fields)


def _left_stopped(ctx: UpContext, failure: StepFailed, previous: str, fields: dict) -> None:
    """The one repair command, and the records: this release failed, the previous one is stopped (not serving)."""
    failure.repair = _repair(ctx)
    failure.undo_notes.append(f"to serve {previous} again: {failure.repair}")
    replaced = {"outcome": ReleaseOutcome.STOPPED, "cause": f"its restore after release "
                f"{ctx.release.id if ctx.release else '?'} failed was interrupted: stopped, kept"} \
        if ctx.replaces is not None and ctx.replaces.outcome is ReleaseOutcome.SERVING else None
    finish(ctx, ReleaseOutcome.FAILED, replaced=replaced, restore_failed="interrupted", **fields)


def _after_failure(ctx: UpContext, failure: StepFailed) -> None:
    """The new release is undone; start the previous one again (unless --no-restore) and record both."""
    ctx.failure = failure
    stop = ctx.stop_step
    fields = {"failed_phase": str(failure.phase) if failure.phase else None, "cause": failure.cause, **_facts(ctx)}
    if stop is None or not stop.touched:
        if ctx.replaces is not None:
            failure.undo_notes.append(f"nothing was stopped: release {ctx.replaces.id} still serves")
        elif ctx.lock is not None:  # got past connecting: say what the nodes are left as
            failure.undo_notes.append("nothing was stopped: whatever served before still serves")
        finish(ctx, ReleaseOutcome.FAILED, **fields)
        return
    if any(note.startswith("undo interrupted") for note in failure.undo_notes):  # a second Ctrl-C, in the undo
        _not_restored(ctx, failure, fields)
        return
    if not stop.ran:
        failure.undo_notes.append("nothing of the previous deployment was running before this up: nothing to restore")
        finish(ctx, ReleaseOutcome.FAILED, **fields)
        return
    if not ctx.opts.restore:
        failure.undo_notes.append("--no-restore: the previous release is left stopped (its containers are kept; "
                                  f"`{_repair(ctx)}` starts it again)")
        finish(ctx, ReleaseOutcome.FAILED, **fields)
        return
    try:
        result = restore_previous(ctx, stop.ran)
    except KeyboardInterrupt:  # between the restore's steps
        result = RestoreResult(False, ctx.replaces, "interrupted", interrupted=True)
    if result.interrupted:
        _restore_interrupted(ctx, failure, stop.ran, fields)
        return
    if result.ok:
        failure.restored = result.release.id if result.release else None
        failure.undo_notes.append(f"restored: {result.detail}")
        finish(ctx, ReleaseOutcome.FAILED, restored=failure.restored, **fields)
    else:
        failure.restore_failed = result.detail
        failure.undo_notes.append(f"RESTORE FAILED: {result.detail}")
        failure.undo_notes.append("NOTHING MAY BE SERVING: the new release failed (above) and the previous one "
                                  "did not come back; `spark-deploy status` shows what runs")
        finish(ctx, ReleaseOutcome.FAILED, restore_failed=result.detail, **fields)


def _close(ctx: UpContext) -> None:
    """Stop watching (the operation lets the lock go and closes the connections after its audit line). A
    late second interrupt here must not replace the run's outcome: it is retried once past it."""
    for _attempt in range(2):
        try:
            ctx.monitor.stop()
            break
        except KeyboardInterrupt:
            continue
