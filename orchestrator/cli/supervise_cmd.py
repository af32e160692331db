"""`supervise enable|disable|status`: a thin wrapper over orchestrator.deploy.supervise."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape

from ..config.load import load_inventory
from ..deploy import supervise as supervise_mod
from ..releases.lock import LockError
from ..render.supervisor import Bounds
from ..runner.events import Events
from ..runner.sinks import TerminalSink
from ..transport.group import GroupError
from ..transport.node import NodeError
from .common import ClusterOpt, Failed, InventoryOpt, JsonOpt, emit_json, err, exit_codes, out
from .conventions import sub_app

app = sub_app()
_DEFAULT = Bounds()


@app.command()
def enable(
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    interval: Annotated[float, typer.Option(min=1, help="Seconds between looks at every rank's container.")]
    = _DEFAULT.interval,
    probe_every: Annotated[int, typer.Option(min=0, help="A real completion every K looks (0: none).")]
    = _DEFAULT.probe_every,
    attempts: Annotated[int, typer.Option(min=1, help="Group restarts allowed per window; past it the release "
                                                      "is stopped as crash-looped.")] = _DEFAULT.attempts,
    window: Annotated[float, typer.Option(min=1, help="The window's seconds.")] = _DEFAULT.window,
    ready_timeout: Annotated[float, typer.Option(min=1, help="Seconds a restarted group has to generate.")]
    = _DEFAULT.ready_timeout,
    as_json: JsonOpt = False,
) -> None:
    """Supervise the serving release from its head node (systemd): a rank that exits, or an engine that stops
    generating, gets the whole group restarted in order, under the deploy lock, at most ATTEMPTS per WINDOW.
    Needs root on the head (sudo -n) and node-to-node SSH (`setup --node-keys`).

    Example: spark-deploy supervise enable --attempts 3 --window 1800
    """
    with exit_codes(as_json):
        inv, _ = load_inventory(inventory)
        events = Events(TerminalSink(err if as_json else out))
        bounds = Bounds(interval=interval, probe_every=probe_every, attempts=attempts, window=window,
                        ready_timeout=ready_timeout)
        try:
            result = supervise_mod.enable(inv, str(inventory), events, bounds)
        except (supervise_mod.SuperviseRefused, LockError, NodeError, GroupError) as exc:
            raise Failed(str(exc)) from exc
        finally:
            events.close()
        if as_json:
            emit_json({"ok": True, "release": result.release.id, "node": result.files.node,
                       "unit": result.files.unit_path})
        else:
            out.print(f"release {result.release.id} is supervised from {escape(result.files.node)} "
                      f"({escape(result.files.unit_path)})")


@app.command()
def disable(inventory: InventoryOpt = None, cluster: ClusterOpt = None, as_json: JsonOpt = False) -> None:
    """Stop and remove the group supervisor (what serves keeps serving).

    Example: spark-deploy supervise disable
    """
    with exit_codes(as_json):
        inv, _ = load_inventory(inventory)
        events = Events(TerminalSink(err if as_json else out))
        try:
            unit = supervise_mod.disable(inv, events)
        except (supervise_mod.SuperviseRefused, LockError, NodeError, GroupError) as exc:
            raise Failed(str(exc)) from exc
        finally:
            events.close()
        if as_json:
            emit_json({"ok": True, "unit": unit})
        else:
            out.print(f"supervisor {escape(unit)} removed")


@app.command()
def status(inventory: InventoryOpt = None, cluster: ClusterOpt = None, as_json: JsonOpt = False) -> None:
    """What the group supervisor says: watching, recovering, waiting for the lock, crash-looped; its recoveries.
    Exit 1 when it stopped a crash-looping release.

    Example: spark-deploy supervise status --json
    """
    with exit_codes(as_json):
        inv, _ = load_inventory(inventory)
        try:
            state = supervise_mod.status(inv)
        except (NodeError, GroupError) as exc:
            raise Failed(str(exc)) from exc
        if as_json:
            emit_json({"ok": not state.crash_looped, "active": state.active, "status": str(state.watch),
                       "release": state.release, "detail": state.detail, "recoveries": state.recoveries,
                       "last": state.last})
        else:
            out.print(escape(state.line()))
        if state.crash_looped:
            raise typer.Exit(1)
