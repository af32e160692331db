"""The steps of `up` that make it a release: the deploy lock, then the record written to every node.

The lock is taken right after connecting, before anything is read that a second command could change.
A stale lock (owner gone, or expired) is taken over loudly; what its dead `up` left running — containers
carrying its run label — is removed before this one goes on, so two deployments never run side by side.
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
import weakref
from concurrent.futures import ThreadPoolExecutor

from ..checks.model_cache import revision_on
from ..docker_cli.containers import list_containers, remove_container
from ..facts.draft import record as draft_record
from ..releases import audit, store
from ..releases.lock import DeployLock
from ..operation.operation import cause_chain, held_lock, node_reasons
from ..releases.record import ModelSeen, RankRecord, Release, ReleaseOutcome, who
from ..render.labels import Label
from ..runner.events import Kind, Phase
from ..runner.runner import StepFailed
from .context import UpContext
from .steps_prepare import NoUndo


_SWEPT: "weakref.WeakSet[DeployLock]" = weakref.WeakSet()  # stale locks taken over whose dead run was swept


class TakeLock(NoUndo):
    """The deploy lock `up` runs under is its operation's (its own, or the enclosing `rollback`, `maintenance
    end`, `bench --compare`): here the dead run of a stale lock it took over is swept, and the history read."""

    phase, detail = Phase.LOCK, "the deploy lock on the head node; the release history"

    def run(self, ctx: UpContext) -> None:
        held = held_lock(ctx.dep.inventory)
        if held is None:  # a bug, never a user's doing: `up` always runs inside an operation that locks
            raise StepFailed(self.phase, "no deploy lock is held for this cluster by the operation `up` runs in",
                             [ctx.dep.inventory.head])
        ctx.lock = held
        stale = held.taken_over[0] if held.taken_over else None
        if stale is not None and stale.run_id and held not in _SWEPT:  # once per lock taken over
            _SWEPT.add(held)
            clean_orphans(ctx, stale.run_id, stale.release)
        elif ctx.op_owned and ctx.op.state is not None:  # read (and repaired) under this lock a moment ago
            ctx.history = ctx.op.state.history
            for node, notes in ctx.history.disagreements.items():
                ctx.events.warn("release history: " + "; ".join(notes), node)
            return
        ctx.history = read_and_repair(ctx)


def read_and_repair(ctx: UpContext, history: store.History | None = None) -> store.History:
    """The history (read here unless given), reconciled; a node whose copy is missing or older gets the
    newest copies back."""
    history = history or store.read_history(ctx.cluster, ctx.dep.inventory)
    for node, notes in history.disagreements.items():
        ctx.events.warn("release history: " + "; ".join(notes), node)
    for line in store.repair(ctx.cluster, ctx.dep.inventory, history):
        ctx.events.note(line)
    return store.read_history(ctx.cluster, ctx.dep.inventory) if history.behind else history


def clean_orphans(ctx: UpContext, run_id: str, release_id: int | None) -> None:
    """Remove every container the dead `up` created (found by its run label, on every node)."""
    def sweep(conn) -> list[str]:
        gone = []
        for c in list_containers(conn, [f"label={Label.RUN}={run_id}"]):
            remove_container(conn, c.id)
            ctx.events.container(Kind.CONTAINER_REMOVED, conn.name, c.name, c.id,
                                 f"{c.name} ({c.id[:12]}, {c.status}) of the dead run {run_id} removed")
            gone.append(c.name)
        return gone

    removed = ctx.cluster.each(sweep)
    if not any(removed.values()):
        ctx.events.note(f"the dead run {run_id} left no container behind")
    if release_id is not None:
        history = store.read_history(ctx.cluster, ctx.dep.inventory)
        record = history.get(release_id)
        if record is not None and record.outcome is ReleaseOutcome.DEPLOYING:
            store.write_release(ctx.cluster, ctx.dep.inventory, record.touch(
                outcome=ReleaseOutcome.ABANDONED, finished_at=time.time(),
                cause=f"its `up` died while holding the lock (run {run_id}); its containers were removed"))


class OpenRelease(NoUndo):
    """Read the history (every node's copy, reconciled), name the release this one replaces, and write
    this release's record — outcome "deploying" — to every node before anything is changed."""

    phase, detail = Phase.RELEASE, "history from every node; this release's record written to every node"

    def run(self, ctx: UpContext) -> None:
        dep, plan = ctx.dep, ctx.plan
        history = ctx.history
        ctx.replaces = _replaced_release(history, ctx)
        with ThreadPoolExecutor(1, thread_name_prefix="lock-note") as pool:  # the lock's note beside the reads
            noted = pool.submit(ctx.lock.note, release=history.next_id) if ctx.lock else None
            seen = ctx.cluster.each(lambda conn: revision_on(
                conn, dep.inventory.node(conn.name).hf_cache, dep.recipe.model.repo, dep.recipe.model.revision))
            if noted:
                noted.result()
        head = ctx.cluster.head  # the draft list's tokenizer (issue 37): no command without a draft list
        tokenizer = draft_record(head, dep.recipe, dep.inventory.node(head.name).hf_cache)
        source = ctx.look.image.source
        now = time.time()
        record = Release(
            id=history.next_id, cluster=ctx.plan.cluster, recipe=dep.recipe.name,
            recipe_text=dep.text(), recipe_digest=plan.recipe_digest,
            inventory_digest=inventory_digest(dep), plan_hash=plan.plan_hash, run_id=plan.run_id,
            container_run=_container_run(ctx), image_id=plan.image_id, image_ref=plan.image_ref,
            diff_ids=list(source.pinned.diff_ids) if source and source.pinned else [],
            ranks=_ranks(ctx),
            model=ModelSeen(repo=dep.recipe.model.repo, revision=dep.recipe.model.revision, per_node=seen),
            secrets=list(dep.recipe.secrets), by=who(), command=audit.command_line(), started_at=now,
            updated_at=now, rollback_of=ctx.opts.rollback_of.id if ctx.opts.rollback_of else None,
            replaced=ctx.replaces.id if ctx.replaces else None, tokenizer=tokenizer,
            upgrade=ctx.opts.upgrade)
        store.write_release(ctx.cluster, dep.inventory, record)
        ctx.release = record
        verb = f"rollback to release {ctx.opts.rollback_of.id}: release" if ctx.opts.rollback_of else "release"
        if ctx.replaces:
            ctx.events.note(f"{verb} {record.id}: plan {plan.plan_hash} replaces release {ctx.replaces.id} "
                            f"(plan {ctx.replaces.plan_hash}, {ctx.replaces.recipe})")
        else:
            ctx.events.note(f"{verb} {record.id}: plan {plan.plan_hash}")


def _ranks(ctx: UpContext) -> list[RankRecord]:
    """The argv that runs: a rollback that starts kept containers runs what they were created with."""
    if ctx.reuse and ctx.opts.rollback_of is not None:  # under the name each one has (an old-style one too)
        return [r.model_copy(update={"container": ctx.reuse[r.node].name} if r.node in ctx.reuse else {})
                for r in ctx.opts.rollback_of.ranks]
    return [RankRecord(rank=l.rank, node=l.node.name, container=l.container, argv=list(l.argv))
            for l in ctx.plan.ranks]


def _container_run(ctx: UpContext) -> str:
    kept = next(iter(ctx.reuse.values()), None)
    return kept.container.ours.run if kept is not None else ctx.plan.run_id


def _replaced_release(history: store.History, ctx: UpContext) -> Release | None:
    """The release whose containers this `up` stops: the newest record of the running plan hash."""
    if ctx.decision is None or not ctx.decision.previous_running:
        return None
    hashes = {c.ours.plan_hash for cs in ctx.decision.previous.values() for c in cs if c.running and c.ours}
    return next((r for r in history.releases if r.plan_hash in hashes
                 and r.outcome in (ReleaseOutcome.SERVING, ReleaseOutcome.DEPLOYING)), None) or \
        next((r for r in history.releases if r.plan_hash in hashes), None)


def inventory_digest(dep) -> str:
    unset = {"cluster_id"} if dep.inventory.cluster_id is None else set()  # as before cluster_id existed
    canonical = json.dumps(dep.inventory.model_dump(mode="json", exclude=unset), sort_keys=True,
                           separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def finish(ctx: UpContext, outcome: ReleaseOutcome | str, *, replaced: dict | None = None, **fields) -> None:
    """Write the release's final state to every node it can reach, the replaced release's new state, and
    one audit line. With no release (failed before one was opened, or already serving): the audit line.
    `replaced`: changes to the replaced release's record when this one did not serve (its restore was
    interrupted: it is stopped, not serving).

    Best effort by design: the deployment's outcome stands whatever the record write says, and a node
    that missed it is named (and repaired by the next mutating command). A late Ctrl-C here must not
    replace the outcome: the write is tried once more past it."""
    if ctx.lock is None or not ctx.lock.held:
        return  # never got as far as the lock: nothing was done, nothing to record
    for attempt in range(2):
        try:
            ctx.cluster.renew_cancel()  # after an interrupt: recording what happened is new work
            _finish(ctx, outcome, replaced, **fields)
            return
        except KeyboardInterrupt:
            if attempt:
                ctx.events.warn("interrupted again while recording the outcome: the record may lag (the next "
                                "command that takes the lock reports it)")


def _answering(ctx: UpContext, within: float = 3.0) -> list:
    """The open connections that answer within a few seconds: a node lost mid-run must not hold up the
    outcome by every write's full timeout (the next command that takes the lock repairs its copy). The
    probes run in daemon threads: one stuck opening a channel is abandoned, not waited for."""
    conns = [c for c in ctx.cluster.nodes if c.is_open]
    answered: dict[str, bool] = {}

    def probe(conn) -> None:
        try:
            answered[conn.name] = conn.run(["true"], timeout=within).ok
        except Exception:  # noqa: BLE001 - any error: not answering
            answered[conn.name] = False

    threads = [threading.Thread(target=probe, args=(c,), daemon=True) for c in conns]
    for t in threads:
        t.start()
    deadline = time.monotonic() + within
    for t in threads:
        t.join(max(0.0, deadline - time.monotonic()))
    for conn in conns:
        if not answered.get(conn.name):
            ctx.events.warn(f"no answer within {within:.0f} s: the outcome is not recorded there now (the next "
                            "command that takes the lock copies it back)", conn.name)
    return [c for c in conns if answered.get(c.name)]


def _finish(ctx: UpContext, outcome: ReleaseOutcome | str, replaced: dict | None, **fields) -> None:
    targets = _answering(ctx)
    for conn in ctx.cluster.nodes:  # the operation's audit line goes only where the records went
        if conn not in targets:
            ctx.op.unanswered(conn.name, "did not answer when the outcome was recorded")
    detail = str(outcome)
    records: list[Release] = []
    if ctx.release is not None and isinstance(outcome, ReleaseOutcome):
        ctx.release = ctx.release.touch(outcome=outcome, finished_at=time.time(), **fields)
        records.append(ctx.release)
        if outcome is ReleaseOutcome.SERVING and ctx.replaces is not None:
            ended = ReleaseOutcome.ROLLED_BACK if ctx.opts.rollback_of else ReleaseOutcome.SUPERSEDED
            records.append(ctx.replaces.touch(outcome=ended, replaced_by=ctx.release.id))
        elif replaced and ctx.replaces is not None:
            records.append(ctx.replaces.touch(**replaced))
        detail = ctx.release.outcome_text()
    elif fields.get("failed_phase"):
        detail = f"failed in {fields['failed_phase']} before a release was recorded: {fields.get('cause', '')}"
    said = {}
    if ctx.failure is not None:  # per node why, and the causes behind it (as an Operation's line carries them)
        said = {"nodes": node_reasons(ctx.failure), "causes": cause_chain(ctx.failure)}
    action = "rollback" if ctx.opts.rollback_of else "up"
    release = ctx.release.id if ctx.release else None
    # the records, each to every answering node at once; the audit line is the operation's (`up` always
    # runs in one: its own, whose line this is, or an enclosing one, whose line gets this as a part)
    with ThreadPoolExecutor(max(1, len(records)), thread_name_prefix="finish") as pool:
        for write in [pool.submit(_write, ctx, record, targets) for record in records]:
            write.result()
    if ctx.op.action == action:
        ctx.op.done(str(outcome), detail, release=release, plan_hash=ctx.plan.plan_hash,
                    recipe=ctx.dep.recipe.name, **said)
    else:
        ctx.op.part(action, str(outcome), detail, release=release, recipe=ctx.dep.recipe.name)


def _write(ctx: UpContext, record: Release, targets) -> None:
    try:
        store.write_release(ctx.cluster, ctx.dep.inventory, record, targets)
    except Exception as exc:  # noqa: BLE001 - named, never hidden; the next command repairs the copy
        ctx.events.warn(f"release {record.id} record not written everywhere: {exc}")
