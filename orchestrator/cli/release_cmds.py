"""`history`, `rollback`, `lock`, `audit`: thin wrappers over orchestrator.releases and deploy.rollback."""

from __future__ import annotations

import sys
import time
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..config.load import load_inventory
from ..deploy import kv_report
from ..deploy import prune as prune_mod
from ..deploy import rollback as rollback_mod
from ..deploy.up import UpOptions
from ..operation import AuditAction, Locking, Observation, Operation, OperationRefused, Outcome, Reach
from ..releases import audit as audit_mod
from ..releases import identity
from ..releases import recoveries as recoveries_mod
from ..releases import lock as lock_mod
from ..runner.events import Events
from ..runner.sinks import TerminalSink
from ..transport.group import Cluster, GroupError
from ..transport.node import NodeError
from .common import (BadInput, ClusterOpt, Failed, InventoryOpt, JsonOpt, Refusal, TailOpt, YesOpt, can_ask, emit_json, err,
                     exit_codes, force_opt, out, refused)
from .deploy_cmds import _events, _signals_for_up, _up_and_report


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S", time.gmtime(stamp)) if stamp else "-"


def _open(inventory: Path):
    inv, _ = load_inventory(inventory)
    cluster = Cluster(inv)
    alive, unreachable = cluster.open_reachable()
    if not alive:
        cluster.close()
        raise Failed("no node answers: " + "; ".join(str(e) for e in unreachable.values()))
    try:
        identity.resolve(cluster, inv, alive, write=False)  # the audit log is keyed by the head's identity
    except BaseException:
        cluster.close()
        raise
    return inv, cluster, alive, unreachable


def history(
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    recipe_of: Annotated[Optional[int], typer.Option("--recipe", min=1, help="Print the recipe release N was "
                                                     "deployed from (its `--set`s applied, comments kept), "
                                                     "instead of the table.", show_default=False)] = None,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="With --recipe: write it to this new "
                                                   "file instead.", show_default=False)] = None,
    as_json: JsonOpt = False,
) -> None:
    """The releases, newest first, read from every node, and which one serves now (by the running containers).

    Each release's recoveries by the group supervisor (`supervise enable`) are shown from its `recover` audit
    lines: how many, the last one's rank, exit code, cause and time down, and a crash loop.

    Example: spark-deploy history --json
    Example: spark-deploy history --recipe 3 -o release-3.yaml
    """
    with exit_codes(as_json):
        if output is not None and recipe_of is None:
            raise BadInput("-o FILE goes with --recipe N (the recipe of release N is written there)")
        if output is not None and output.exists():
            raise BadInput(f"-o {output}: the file exists; name a new one (nothing was written)")
        inv, _ = load_inventory(inventory)
        with Observation(inv, what="history", cluster_factory=Cluster) as seen:
            state = seen.state
            log = audit_mod.read(seen.cluster, inv, seen.alive)  # the supervisor's `recover` lines
        hist = state.history
        recovered = recoveries_mod.of_audit(log.lines)
        now = state.serving if state.serving_known else None
        for node, why in state.unreachable.items():
            err.print(f"[yellow]warning[/]: {escape(node)} unreachable, its copy of the history was not read: "
                      f"{escape(str(why))}")
        for node, why in state.unread.items():
            err.print(f"[yellow]warning[/]: {escape(node)}: {escape(why)}")
        for node, notes in hist.disagreements.items():
            if node not in state.unreachable:
                err.print(f"[yellow]warning[/]: {escape(node)}'s copy of the history disagrees: "
                          f"{escape('; '.join(notes))}")
        if recipe_of is not None:
            _recipe_of(hist.releases, recipe_of, output, as_json)
            return
        from ..bench.drift import drift, drift_text  # each release's bench next to the previous one's

        drifts = drift(hist.releases)
        if as_json:
            emit_json([{"id": r.id, "plan_hash": r.plan_hash, "recipe": r.recipe, "image_id": r.image_id,
                        "outcome": str(r.outcome), "outcome_text": r.outcome_text(), "failed_phase": r.failed_phase,
                        "cause": r.cause, "restored": r.restored, "restore_failed": r.restore_failed,
                        "rollback_of": r.rollback_of,
                        "started_at": r.started_at, "finished_at": r.finished_at, "by": r.by,
                        "serving": now is not None and r.id == now.id, "run_id": r.run_id,
                        "bench": r.bench, "kv_cache": r.kv_cache, "drift": drifts.get(r.id, {}),
                        "acceptance": r.acceptance, "after_ready": r.after_ready, "engine": r.engine,
                        "tokenizer": r.tokenizer, "upgrade": r.upgrade, "gate": r.gate,
                        "tune": r.tune,
                        "recoveries": recovered[r.id].as_dict() if r.id in recovered else None}
                       for r in hist.releases])
            return
        if not hist.releases:
            out.print("no releases recorded on any node yet")
            return
        table = Table(title=f"releases of {inv.cluster}")
        from ..bench.record import headline_text  # the bench headline recorded with the release

        from ..deploy.after_ready import summary as after_ready_text
        from ..facts.fingerprint import short as engine_short
        from ..bench.gate import gate_text  # `up --gate`'s verdict, recorded with the candidate's release

        columns = ("", "release", "outcome", "recipe", "plan", "image", "started (UTC)", "by", "bench tok/s",
                   "KV tokens", "engine", "vs previous", "acceptance", "gate", "after ready", "recoveries")
        rows = []
        for r in hist.releases:
            mark = "[bold green]▶ serving[/]" if now is not None and r.id == now.id else ""
            rows.append((mark, str(r.id), escape(r.outcome_text()), escape(r.recipe), r.plan_hash,
                         r.image_id.removeprefix("sha256:")[:12], _when(r.started_at), escape(r.by),
                         escape(headline_text(r.bench)), escape(kv_report.text(r.kv_cache)),
                         escape(engine_short(r.engine)),
                         escape(drift_text(drifts.get(r.id, {}))), escape(_acceptance_text(r.acceptance)),
                         escape(gate_text(r.gate)),
                         escape(after_ready_text(r.after_ready) or "-"),
                         escape(recovered[r.id].text() if r.id in recovered else "-")))
        # a column no release has anything in (no gate, no recovery yet) is left out: the table stays readable
        shown = [i for i, name in enumerate(columns) if i < 8 or any(row[i] not in ("", "-") for row in rows)]
        for i in shown:
            table.add_column(columns[i], overflow="fold")
        for row in rows:
            table.add_row(*(row[i] for i in shown))
        out.print(table)
        if not state.serving_known:
            out.print("which release serves is not judged: not every node answered")
        elif now is None:
            out.print("no release serves now (no plan runs on every rank)")


def _recipe_of(releases: list, wanted: int, output: Path | None, as_json: bool) -> None:
    """`history --recipe N`: the recipe text release N recorded, as it was deployed (image.id pinned, every
    `--set` applied): `up` of it deploys the same plan."""
    release = next((r for r in releases if r.id == wanted), None)
    if release is None:
        known = ", ".join(str(r.id) for r in releases) or "none recorded yet"
        raise BadInput(f"--recipe {wanted}: no such release in the history (releases: {known})")
    if output is not None:
        try:
            with open(output, "x") as f:  # "x": never replace a file that appeared since the check
                f.write(release.recipe_text)
        except OSError as exc:
            raise BadInput(f"-o {output}: {exc.strerror or exc} (nothing was written)") from None
    if as_json:
        emit_json({"ok": True, "release": release.id, "recipe": release.recipe, "plan_hash": release.plan_hash,
                   "written": str(output) if output is not None else None,
                   "text": None if output is not None else release.recipe_text})
    elif output is not None:
        out.print(f"wrote {escape(str(output))}: recipe {escape(release.recipe)} of release {release.id} "
                  f"(plan {release.plan_hash})")
    else:
        sys.stdout.write(release.recipe_text if release.recipe_text.endswith("\n") else release.recipe_text + "\n")
        sys.stdout.flush()


def _acceptance_text(results: list[dict]) -> str:
    """`4 pass, 1 skip; FAILED logprobs-finite`."""
    if not results:
        return "-"
    counts: dict[str, int] = {}
    for r in results:
        counts[r["status"]] = counts.get(r["status"], 0) + 1
    failed = [r["name"] for r in results if r["status"] in ("fail", "changed")]
    return ", ".join(f"{n} {s}" for s, n in counts.items()) + (f"; {', '.join(failed)}" if failed else "")


def rollback(
    release: Annotated[Optional[int], typer.Argument(help="The release to deploy again (default: the one that "
                                                          "served before the current one).", show_default=False)] = None,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    yes: YesOpt = False,
    no_restore: Annotated[bool, typer.Option("--no-restore", help="If it fails, leave the nodes empty instead of "
                                                                  "starting the current release again.")] = False,
    ready_timeout: Annotated[float, typer.Option(help="Seconds to wait for the API to serve.")] = 5400.0,
    as_json: JsonOpt = False,
) -> None:
    """Deploy a previous release again, exactly as recorded (its kept containers are started, not re-created).

    When today's inventory changes the recorded plan, the changes are shown and it asks (--yes: it does not).

    Example: spark-deploy rollback 3
    """
    with _signals_for_up(), exit_codes(as_json):
        events = _events(as_json)

        def announce(prepared: rollback_mod.RollbackPlan) -> None:
            for line in prepared.changes:  # confirmed with --yes: still shown
                err.print(escape(line))
            current = f"release {prepared.current.id}" if prepared.current else "nothing serving"
            t = prepared.target
            if not as_json:
                out.print(f"rollback: {current} -> release {t.id} ({escape(t.recipe)}, plan {t.plan_hash}, "
                          f"image {t.image_id[:19]})")

        opts = UpOptions(restore=not no_restore, ready_timeout=ready_timeout)

        inv, idoc = load_inventory(inventory)  # parsed once: the recorded recipe is bound to it

        def start(confirmed: bool) -> None:
            _up_and_report(lambda: rollback_mod.rollback(inv, str(inventory), release, events, inventory_doc=idoc,
                                                         yes=confirmed, options=opts, announce=announce),
                           events, as_json)

        try:
            try:
                start(yes)
            except rollback_mod.InventoryChanged as exc:  # nothing was touched: ask, then start again confirmed
                if not can_ask(as_json):
                    raise Failed(f"{exc}; not asked without a terminal: rerun with --yes to deploy it anyway") from exc
                if not typer.confirm("deploy it with today's inventory anyway?", default=False, err=True):
                    raise Failed(f"not confirmed: {exc}") from exc
                start(True)
        except (rollback_mod.RollbackRefused, GroupError) as exc:
            raise Failed(str(exc)) from exc


LockForce = force_opt(Refusal.LIVE_LOCK, "release a lock that is not stale (its owner may be alive)")


class LockAction(StrEnum):
    STATUS = "status"
    RELEASE = "release"


def lock(
    action: Annotated[LockAction, typer.Argument(help="status, or release.")] = LockAction.STATUS,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    force: LockForce = False,
    as_json: JsonOpt = False,
) -> None:
    """Who holds the deploy lock on the head node, since when, and whether it is stale; or release it.

    Example: spark-deploy lock release --force
    """
    with exit_codes(as_json):
        inv, _ = load_inventory(inventory)
        with Operation(inv, Events(TerminalSink(err)), AuditAction.LOCK_RELEASE, reach=Reach.HEAD,
                       lock=Locking.NONE) as op:
            held = op.state.lock
            why = lock_mod.stale_reason(held) if isinstance(held, lock_mod.LockDetails) else (
                "unreadable" if held is not None else None)
            if action is LockAction.STATUS:
                if as_json:
                    emit_json({"held": held is not None, "stale": why, "path": lock_mod.lock_path(inv),
                               "owner": held.__dict__ if isinstance(held, lock_mod.LockDetails) else held})
                elif held is None:
                    out.print(f"not held ({lock_mod.lock_path(inv)} on {inv.head})")
                else:
                    shown = held.describe() if isinstance(held, lock_mod.LockDetails) else repr(held)
                    out.print(f"held by {escape(shown)}" + (f" — [yellow]stale[/]: {escape(why)}" if why else ""))
                return
            if held is None:
                if as_json:
                    emit_json({"ok": True, "released": False, "held": False})
                else:
                    out.print("not held: nothing to release")
                return
            if why is None and not force:
                op.done(Outcome.REFUSED, f"held by a live owner ({held.describe()}) and no --force")
                raise refused(Refusal.LIVE_LOCK, f"the lock is held by a live owner ({held.describe()})")
            lock_mod.force_release(op.cluster.head, inv)
            was = held.describe() if isinstance(held, lock_mod.LockDetails) else "unreadable"
            op.done("released", (f"stale: {why}" if why else "forced") + "; was held by " + was)
            if as_json:
                emit_json({"ok": True, "released": True, "stale": why, "was_held_by": was})
            else:
                out.print("released")


def audit(
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    tail: TailOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """The audit log, merged from every node: who did what, when, to which release, with what outcome.

    Example: spark-deploy audit --tail 20
    """
    with exit_codes(as_json):
        inv, cluster, alive, unreachable = _open(inventory)
        try:
            log = audit_mod.read(cluster, inv, alive)
        finally:
            cluster.close()
        lines = log.lines[-tail:] if tail else log.lines
        for node, why in {**{n: str(e) for n, e in unreachable.items()}, **log.unreadable}.items():
            err.print(f"[yellow]warning[/]: {escape(node)}: audit log not read: {escape(why)}")
        for node, count in log.missing_on.items():
            err.print(f"[yellow]warning[/]: {escape(node)} lacks {count} line(s) the other node(s) have")
        if as_json:
            emit_json(lines)
            return
        for line in lines:
            release = f" release {line['release']}" if line.get("release") is not None else ""
            out.print(f"{_when(line.get('at'))}  {escape(line.get('by', '?'))}  {escape(line.get('action', '?'))}"
                      f"{release}: {escape(str(line.get('outcome', '?')))}"
                      + (f" — {escape(line['detail'])}" if line.get("detail") not in (None, "", line.get("outcome"))
                         else ""))


def _bytes(n: int) -> str:
    for unit in ("B", "kB", "MB", "GB", "TB"):
        if n < 1000 or unit == "TB":
            return f"{n:.4g} {unit}" if unit != "B" else f"{n} B"
        n /= 1000
    return f"{n} B"


def prune(
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    keep: Annotated[int, typer.Option("--keep", min=1, help="Keep the containers and images of this many of the "
                                                            "newest releases that served.")] = 3,
    as_json: JsonOpt = False,
) -> None:
    """Remove stopped containers and images of older releases on every node; print the bytes freed.

    Never the serving release's, nor an image any other container uses.

    Example: spark-deploy prune --keep 2
    """
    with exit_codes(as_json):
        inv, _ = load_inventory(inventory)
        events = _events(as_json)
        try:
            result = prune_mod.prune(inv, keep, events)
        except (lock_mod.LockError, NodeError, GroupError, OperationRefused) as exc:
            events.result(False, error=str(exc))
            events.close()
            raise Failed(str(exc)) from exc
        events.result(result.ok, kept=result.kept, serving=result.serving, freed_bytes=result.freed,
                      nodes={n: p.__dict__ for n, p in result.nodes.items()}, unreachable=result.unreachable)
        events.close()
        if not as_json:
            out.print(f"kept releases {', '.join(map(str, result.kept)) or 'none'}"
                      + (f" (release {result.serving} serves)" if result.serving else
                         " (which release serves is unknown: a node was not read)" if not result.serving_known else ""))
            for node, p in result.nodes.items():
                out.print(f"{escape(node)}: removed {len(p.containers)} container(s), {len(p.images)} image(s), "
                          f"freed {_bytes(p.freed)}" + (f" — [red]{escape(p.error)}[/]" if p.error else ""))
            out.print(f"freed {_bytes(result.freed)} in all (docker system df, before and after)")
        if not result.ok:
            raise Failed("prune incomplete: " + "; ".join(
                [f"{n}: unreachable" for n in result.unreachable] + [f"{n}: {p.error}" for n, p in result.nodes.items()
                                                                    if p.error]))
