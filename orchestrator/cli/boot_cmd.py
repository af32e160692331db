"""`boot enable|disable|status`: a thin wrapper over orchestrator.deploy.boot."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..config.load import load_deployment, load_inventory
from ..deploy import boot as boot_mod
from ..facts.boot import BootMatch
from ..releases.lock import LockError
from ..runner.events import Events
from ..runner.sinks import TerminalSink
from ..transport.node import NodeError
from .conventions import sub_app
from .common import (
    Failed,
    ClusterOpt, InventoryOpt,
    YesOpt,
    can_ask,
    JsonOpt,
    RecipeArg,
    emit_json,
    err,
    exit_codes,
    out, FailedAsShown, only_node)

app = sub_app()

OptionalRecipe = Annotated[Optional[Path], typer.Argument(help="Limit to this recipe's unit.", show_default=False)]
_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def _item_line(item) -> str:
    return (f"[{_STYLE[str(item.status)]}]{escape(str(item.match))}[/]: {escape(str(item.kind))} "
            f"{escape(item.name)} starts {escape(item.starts)}")


@app.command()
def enable(
    recipe: RecipeArg,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Make the serving release come back on boot: one systemd unit per node for its rank, started now so it
    also starts a rank again that exits (the peers wait, bounded, for the head's rendezvous port; restarts
    are bounded). Anything else that would come back is named, and it asks before turning them off (--yes:
    it does not ask).

    Example: spark-deploy boot enable recipes/dspark-0731-b12x.yaml --yes
    """
    with exit_codes(as_json):
        dep = load_deployment(recipe, inventory)
        events = Events(TerminalSink(err if as_json else out))
        try:
            result = boot_mod.enable(dep, events, yes=yes)
            if result.conflicts and not yes:  # nothing was changed: name them, ask, then enable confirmed
                listed = "\n".join(f"  {c.describe()}" for c in result.conflicts)
                if not can_ask(as_json):
                    raise Failed("other things come back on boot and are not the serving release; nothing was "
                                 f"changed:\n{listed}\nnot asked without a terminal: run again with --yes to turn "
                                 "them off (units disabled, restart policies set to no)")
                err.print("other things come back on boot and are not the serving release:\n" + escape(listed))
                if not typer.confirm("turn them off (units disabled, restart policies set to no)?", default=False,
                                     err=True):
                    raise Failed("not confirmed: nothing was changed")
                result = boot_mod.enable(dep, events, yes=True)
        except (boot_mod.BootRefused, LockError, NodeError) as exc:
            raise Failed(str(exc)) from exc
        finally:
            events.close()
        missing = [n for n, b in result.after.items() if not any(i.match is BootMatch.SERVING for i in b.items)]
        if as_json:
            emit_json({"ok": not missing, "release": result.release.id, "plan_hash": result.release.plan_hash,
                       "units": [{"node": u.node, "path": u.path, "container": u.container} for u in result.units],
                       "turned_off": list(result.disabled), "not_coming_back_on": missing})
        if missing:
            raise Failed(f"read again, the serving release does not come back on {', '.join(missing)}")
        if as_json:
            return
        for line in result.disabled:
            out.print(f"turned off: {escape(line)}")
        out.print(f"release {result.release.id} (plan {result.release.plan_hash}) comes back on boot:")
        for u in result.units:
            out.print(f"  {escape(u.node)}: {escape(u.path)} enabled, starts {escape(u.container)} (watched now)")


@app.command()
def disable(recipe: OptionalRecipe = None, inventory: InventoryOpt = None, cluster: ClusterOpt = None,
            as_json: JsonOpt = False) -> None:
    """Disable and remove our boot units (this recipe's, or every one of this cluster), and give the containers
    back their own restart policy.

    Example: spark-deploy boot disable
    """
    with exit_codes(as_json):
        name = load_deployment(recipe, inventory).recipe.name if recipe else None
        inv, _ = load_inventory(inventory)
        events = Events(TerminalSink(err if as_json else out))
        try:
            result = boot_mod.disable(inv, name, events)
        except (boot_mod.BootRefused, LockError, NodeError) as exc:
            raise Failed(str(exc)) from exc
        finally:
            events.close()
        if as_json:
            emit_json({"ok": True, "recipe": name, "removed": result.removed})
        elif not any(result.removed.values()):
            out.print("no boot unit of spark-deploy" + (f" for {name}" if name else "") + " on any node")


@app.command()
def status(recipe: OptionalRecipe = None, inventory: InventoryOpt = None, cluster: ClusterOpt = None,
           as_json: JsonOpt = False) -> None:
    """Per node, what comes back on boot: our unit (enabled?, the container it starts, its plan vs the serving
    release), other units, restart policies. Exit 1 when a node cannot say (no systemd, unreachable).

    Example: spark-deploy boot status --json
    """
    with exit_codes(as_json):
        name = load_deployment(recipe, inventory).recipe.name if recipe else None
        inv, _ = load_inventory(inventory)
        report = boot_mod.status(inv, name)
        if as_json:
            emit_json(report.as_dict())
        else:
            s = report.serving
            out.print(f"serving on {escape(report.cluster)}: " +
                      (f"release {s.id} ({escape(s.recipe)}, plan {s.plan_hash})" if s else
                       f"unknown ({escape(report.serving_unknown)})" if report.serving_unknown else "nothing"))
            for n in report.nodes:
                if not n.boot.systemd:
                    out.print(f"{escape(n.node)}: [bold red]cannot say[/] ({escape(n.systemd_why)})")
                    continue
                engine = "docker.service enabled" if n.boot.engine_enabled else "docker.service NOT enabled"
                out.print(f"{escape(n.node)}: {engine}")
                for u in n.our_units:
                    plan = (f", plan {u.plan_hash}" + ("" if not s or u.plan_hash == s.plan_hash
                                                      else f" (serving: {s.plan_hash})")) if u.plan_hash else ""
                    out.print(f"  our unit {escape(u.unit)}: {escape(u.state)}"
                              + (f", starts {escape(u.container)}" if u.container else "") + plan)
                for item in n.boot.items:
                    out.print(f"  {_item_line(item)}")
                if not n.boot.items:
                    out.print("  nothing comes back on boot")
                if s and not any(i.match is BootMatch.SERVING for i in n.boot.items):
                    out.print("  [yellow]the serving release does not come back[/] (`spark-deploy boot enable RECIPE`)")
        for node, why in report.unreachable.items():
            err.print(f"[bold red]{escape(node)}[/]: unreachable: {escape(why)}")
        for n in report.nodes:
            if not n.boot.systemd:
                err.print(f"[bold red]{escape(n.node)}[/]: {escape(n.systemd_why)}: what comes back on boot "
                          "cannot be read there")
        if not report.ok:
            cannot = {**report.unreachable, **{n.node: n.systemd_why for n in report.nodes if not n.boot.systemd}}
            raise FailedAsShown("; ".join(f"{n}: {why}: what comes back on boot cannot be read there"
                                          for n, why in cannot.items()) or "boot status is not ok",
                                node=only_node(cannot))
