"""`maintenance begin|verify|end`: thin wrappers over orchestrator.maintenance (what to print, exit codes)."""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from ..config.load import load_deployment
from ..maintenance import end as end_mod
from ..maintenance import window
from ..window.baseline import BOOT_SERVING, Baseline, NodeFacts
from ..maintenance.diff import ADVICE, BLOCKING, GIB, Drift
from ..window.store import baseline_path
from ..releases.lock import LockError
from ..transport.group import GroupError
from ..transport.node import NodeError
from .conventions import sub_app
from .common import (
    BadInput,
    Failed,
    ClusterOpt, InventoryOpt,
    Refusal,
    YesOpt,
    force_opt,
    JsonOpt,
    RecipeArg,
    emit_json,
    err,
    exit_codes,
    out, FailedAsShown, only_node)
from .deploy_cmds import _events, _signals_for_up

app = sub_app(help="Before a maintenance window: a baseline of every node; after it: what changed, and the "
                       "serving release brought back.")

OptionalRecipe = Annotated[Path | None, typer.Argument(help="The recipe (default: the open window's).",
                                                          show_default=False)]
MAX_REASON = 300
BeginForce = force_opt(Refusal.WINDOW_OPEN, "replace the baseline of a window that is already open")
EndForce = force_opt(Refusal.BLOCKING_CHANGES, "go on although verify found changes the release depends on")


def _when(stamp: float | None) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp)) if stamp else "-"


def _recipe_name(recipe: Path | None, inventory: Path) -> str | None:
    return load_deployment(recipe, inventory).recipe.name if recipe else None


@contextmanager
def _errors() -> Iterator[None]:
    """The maintenance package's exceptions as the exceptions exit_codes() maps (2: input, 1: failure)."""
    try:
        yield
    except window.MaintenanceInput as exc:
        raise BadInput(str(exc)) from exc
    except (window.MaintenanceError, LockError, GroupError, NodeError) as exc:
        raise Failed(str(exc)) from exc


def _facts_table(base: Baseline) -> Table:
    table = Table(title=f"baseline of {base.cluster} ({_when(base.opened_at)})")
    table.add_column("fact")
    nodes = list(base.nodes)
    for node in nodes:
        table.add_column(node, overflow="fold")
    rows = [
        ("driver", lambda f: f.gpu.driver if f.gpu else None),
        ("CUDA", lambda f: f.gpu.cuda if f.gpu else None),
        ("SM clock", lambda f: f.gpu.clock_text() if f.gpu else None),
        ("kernel", lambda f: f.kernel), ("OS", lambda f: f.os_release),
        ("docker", lambda f: f"{f.docker_version} / {f.docker_driver}" if f.docker_version else None),
        ("memory", lambda f: f"{f.mem_total / GIB:.1f} GiB total, {f.mem_available / GIB:.1f} GiB available"
         if f.mem_total else None),
        ("image", lambda f: (("present, " + str(len(f.image.diff_ids)) + " layers") if f.image.present else "MISSING")
         if f.image else None),
        ("model", lambda f: (f"{f.model.commit[:12]}, {len(f.model.files)} files" if not f.model.absent
                             else f"absent: {f.model.absent}") if f.model else None),
        ("units enabled", lambda f: ", ".join(f.units_enabled) if f.units_enabled is not None else
         f"no systemd ({f.systemd})" if f.systemd else None),
        ("restart policies", lambda f: "; ".join(f.restart_policies) or "none" if f.restart_policies is not None
         else None),
    ]
    for label, shown in rows:
        cells = []
        for node in nodes:
            f: NodeFacts = base.nodes[node]
            value = None if f.unreachable else shown(f)
            cells.append(escape(value) if value is not None else f"[dim]{escape(f.unreachable or 'not read')}[/]")
        table.add_row(label, *cells)
    return table


def _print_boot(base: Baseline) -> None:
    out.print("[bold]what comes back on boot[/] (judged against "
              + (f"release {base.release}, plan {base.plan_hash})" if base.release is not None else "nothing: "
                 "nothing serves)"))
    for node, f in base.nodes.items():
        if f.unreachable:
            out.print(f"  {escape(node)}: [red]unreachable[/] ({escape(f.unreachable)})")
            continue
        if f.on_boot is None:
            why = f.errors.get("restart_policies") or "this version gathers no boot facts"
            out.print(f"  {escape(node)}: [dim]not judged ({escape(why)})[/]")
            continue
        if f.systemd:
            out.print(f"  {escape(node)}: [yellow]no systemd here ({escape(f.systemd)})[/]: units not judged")
        if not f.on_boot:
            out.print(f"  {escape(node)}: nothing comes back")
        for e in f.on_boot:
            style = "green" if e.match == BOOT_SERVING else "bold red"
            out.print(f"  {escape(node)}: {escape(e.kind)} {escape(e.name)} [{style}]{escape(e.match)}[/]: starts "
                      f"{escape(e.starts)}")
        if base.release is not None and not base.stopped and not any(e.match == BOOT_SERVING for e in f.on_boot):
            out.print(f"  {escape(node)}: [yellow]release {base.release} does not come back on boot[/] "
                      "(`maintenance end` brings it back; `spark-deploy boot enable` makes it come back by itself)")


def begin(
    recipe: RecipeArg,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    reason: Annotated[str, typer.Option("--reason", help="Why: kept in the baseline and the audit log.")] = "",
    stop: Annotated[bool, typer.Option("--stop", help="Stop the serving release (peers first, containers kept); "
                                                      "`maintenance end` brings it back.")] = False,
    force: BeginForce = False,
    as_json: JsonOpt = False,
) -> None:
    """Open a maintenance window: preflight, then a baseline of every node (and what serves) on every node.

    Preflight failures are recorded and make it exit 1; the baseline is written anyway.
    Example: spark-deploy maintenance begin recipes/dspark-0731-b12x.yaml --reason "DGX OS update" --stop
    """
    with exit_codes(as_json), _errors():
        if len(reason) > MAX_REASON:
            raise BadInput(f"--reason is {len(reason)} characters; at most {MAX_REASON} (it goes into every "
                           "node's audit log, one line each)")
        dep = load_deployment(recipe, inventory)
        events = _events(as_json)
        result = window.begin(dep, events, reason, stop, force)
        base = result.baseline
        if as_json:
            events.result(result.ok, baseline=base.model_dump(mode="json"), preflight=result.report.as_dict(),
                          not_written=result.not_written,
                          stop_failed=result.stop.failed if result.stop else {})
            events.close()
        else:
            events.close()
            if result.replaced:
                err.print(f"[yellow]warning[/]: replaced the open window: {escape(result.replaced.describe())}")
            served = (f"release {base.release} (plan {base.plan_hash}, image {(base.image_id or '')[:19]})"
                      if base.release is not None else "nothing serves")
            out.print(f"maintenance window opened on {escape(base.cluster)}: {escape(served)}"
                      + (f"; reason: {escape(base.reason)}" if base.reason else ""))
            out.print(_facts_table(base))
            _print_boot(base)
            for line in base.preflight_skipped:
                out.print(f"[dim]preflight: {escape(line)} (skipped)[/]")
            if base.preflight_ok:
                out.print("[green]preflight: every check passed[/]")
            for v in result.report.failed():
                out.print(f"[bold red]preflight {escape(v.name)}[/] ({', '.join(v.failed_nodes())}): {escape(v.fix)}")
            if result.stop:
                for s in result.stop.stopped:
                    kept = f", kept as {escape(s.kept)}" if s.kept != s.name else ", kept"
                    out.print(f"stopped {escape(s.node)}: {escape(s.name)} ({s.id[:12]}){kept}")
                if result.stop.stopped and result.stop.ok:
                    out.print(f"release {base.release} is stopped: `spark-deploy maintenance end` brings it back")
            written = [n for n in base.nodes if n not in result.not_written]
            path = baseline_path(dep.inventory, dep.inventory.head)
            out.print(f"baseline written to {escape(path)} on {escape(', '.join(written) or 'no node')}; after the "
                      "window: `spark-deploy maintenance verify`, then `spark-deploy maintenance end`")
        problems = [f"preflight failed: {'; '.join(base.preflight_failed)}"] if not base.preflight_ok else []
        problems += [f"{n}: the baseline could not be written: {why}" for n, why in result.not_written.items()]
        if result.stop and not result.stop.ok:
            problems += [f"{n}: could not stop the release cleanly: {why}" for n, why in result.stop.failed.items()]
            problems.append(result.stop.summary(base.release))
        if problems:
            raise Failed("the window is open, with problems: " + " | ".join(problems))


def _drift_table(drift: Drift, base: Baseline) -> Table:
    table = Table(title=f"since the baseline of {_when(base.opened_at)}")
    for column in ("fact", "node", "before", "after"):
        table.add_column(column, overflow="fold")
    for r in drift.rows:
        style = "bold yellow" if r.changed else ""
        cells = [escape(str(r.fact)), escape(r.node), escape(r.before), escape(r.after)]
        if r.changed:
            cells = [f"[{style}]{c}[/]" for c in cells[:2]] + [f"[reverse]{cells[2]}[/]", f"[reverse bold]{cells[3]}[/]"]
        table.add_row(*cells)
    return table


def _print_verify(v: window.VerifyResult) -> None:
    base = v.baseline
    out.print(f"maintenance window: {escape(base.describe())}")
    out.print(_drift_table(v.drift, base))
    if not v.drift.changes:
        out.print("[green]nothing changed since the baseline[/]")
    for c in v.drift.changes:
        style = "bold red" if c.consequence in BLOCKING else "yellow"
        out.print(f"changed: {escape(c.text())} — [{style}]{escape(str(c.consequence))}[/]")
    out.print("[bold]what it means for the release:[/]")
    for c in v.drift.consequences:
        style = "bold red" if c in BLOCKING else "green"
        out.print(f"  [{style}]{escape(str(c))}[/]: {escape(ADVICE[c])}")
    if base.release is None:
        out.print("nothing served when the window began")
    elif v.serves_again:
        out.print(f"release {v.serving_now.id} serves the baseline's plan {base.plan_hash}")
    else:
        now = f"release {v.serving_now.id} serves instead" if v.serving_now else "nothing serves now"
        out.print(f"release {base.release} does not serve ({now}): `spark-deploy maintenance end` brings it back")
    for node, why in v.problems.items():
        err.print(f"[yellow]warning[/]: {escape(node)}: {escape(why)}")


def verify(
    recipe: OptionalRecipe = None,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    fabric: Annotated[bool, typer.Option(
        "--fabric", help="Also measure the fabric (a few seconds per link and direction) against the baseline "
                         "`fabric test --save` kept.")] = False,
    fabric_min: Annotated[float, typer.Option("--fabric-min", min=0.01, max=1.0,
                                              help="With --fabric: the fraction of the baseline a direction "
                                                   "must reach.")] = 0.8,
    as_json: JsonOpt = False,
) -> None:
    """Every fact of the baseline beside the same fact now, per node: what changed and what it means.

    Exit 1 when something the release depends on changed, or (--fabric) a fabric direction is below
    --fabric-min of its baseline.

    Example: spark-deploy maintenance verify --json
    Example: spark-deploy maintenance verify --fabric
    """
    with exit_codes(as_json), _errors():
        result = window.verify(str(inventory), _recipe_name(recipe, inventory), fabric_min if fabric else None)
        judged = result.fabric
        drops = judged.drops if judged else []
        fabric_doc = {"fabric": {"drops": [c.said() for c in drops],
                                 "compared": [c.said() for c in judged.compared] if judged else [],
                                 "note": result.fabric_note or (judged.method_changed if judged else "")}}
        if as_json:
            emit_json({**result.drift.as_dict(), **(fabric_doc if fabric else {}),
                       "window": {"opened_at": result.baseline.opened_at, "by": result.baseline.by,
                                  "reason": result.baseline.reason, "release": result.baseline.release,
                                  "plan_hash": result.baseline.plan_hash, "stopped": result.baseline.was_stopped},
                       "serving_now": result.serving_now.id if result.serving_now else None,
                       "serves_again": result.serves_again})
        else:
            _print_verify(result)
            if fabric:
                _print_fabric(result)
        if result.drift.blocking or drops:
            raise FailedAsShown("; ".join([f"{c.text()}: {c.consequence}" for c in result.drift.blocking]
                                          + [c.said() for c in drops]) or "verify found blocking changes",
                                node=only_node(c.node for c in result.drift.blocking) if not drops else None)


def _print_fabric(result: window.VerifyResult) -> None:
    judged = result.fabric
    if judged is None or judged.method_changed:
        out.print(f"[yellow]fabric not judged[/]: {escape(result.fabric_note or judged.method_changed)}")
        return
    for c in judged.compared:
        out.print(f"{'[bold red]slower[/]' if c.dropped else '[green]fabric ok[/]'} {escape(c.said())}")


def end(
    recipe: OptionalRecipe = None,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    force: EndForce = False,
    yes: YesOpt = False,
    ready_timeout: Annotated[float, typer.Option(help="Seconds to wait for the API to serve.")] = 5400.0,
    as_json: JsonOpt = False,
) -> None:
    """Close the window: verify, bring the baseline's release back (a rollback, every wait), audit it.

    --yes: deploy it although today's inventory changes its recorded plan (do not ask).

    Example: spark-deploy maintenance end --force
    """
    with _signals_for_up(), exit_codes(as_json), _errors():
        events = _events(as_json)
        try:
            result = end_mod.end(str(inventory), _recipe_name(recipe, inventory), events, yes, ready_timeout,
                                 on_verified=None if as_json else _print_verify, force=force)
        except BaseException:
            events.close()
            raise
        if as_json:
            events.result(result.ok, outcome=str(result.outcome), detail=result.detail,
                          changes=result.verify.drift.as_dict().get("changes", []))
        events.close()
        if not result.ok:
            raise Failed(f"{result.detail}; the window stays open: fix it, then `spark-deploy maintenance end` again")
        if as_json:
            return
        out.print(f"[bold green]{escape(str(result.outcome))}[/]: {escape(result.detail)}")
        out.print(f"maintenance window closed ({_when(result.verify.baseline.opened_at)} - "
                  f"{_when(result.closed.closed_at if result.closed else None)}); `spark-deploy audit` shows it")


app.command()(begin)
app.command()(verify)
app.command()(end)
