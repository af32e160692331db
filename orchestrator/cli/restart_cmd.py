"""`restart [RECIPE]`: the serving release's whole group stopped and started again in order, by hand."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..config.load import load_inventory, load_recipe
from ..deploy import restart as restart_mod
from ..deploy.context import UpOptions
from ..transport.cancel import signals_interrupt
from ..transport.group import GroupError
from .common import ClusterOpt, Failed, InventoryOpt, JsonOpt, exit_codes, out
from .deploy_cmds import _events, _signals_for_up


def restart(
    recipe: Annotated[Optional[Path], typer.Argument(help="The recipe YAML file: restart only if its recipe's "
                                                         "release is the one serving (its recorded recipe is "
                                                         "used, not the file).", show_default=False)] = None,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    ready_timeout: Annotated[float, typer.Option(help="Seconds to wait for the API to serve.")] = 5400.0,
    join_timeout: Annotated[float, typer.Option("--join-timeout", min=1,
                                                help="Seconds for every peer to join the head's rendezvous.")] = 120.0,
    as_json: JsonOpt = False,
) -> None:
    """Restart the serving release's whole group: survivors stopped, head, rendezvous, peers, ready, log checks.

    Also when a rank died (its release no longer serves): a tensor-parallel group cannot take one rank back.
    The same containers are started again (`docker start`); when it fails, it says what serves.

    Example: spark-deploy restart
    """
    with _signals_for_up(), exit_codes(as_json):
        inv, idoc = load_inventory(inventory)
        name = load_recipe(recipe)[0].name if recipe else None
        events = _events(as_json)
        opts = UpOptions(ready_timeout=ready_timeout, join_timeout=join_timeout)
        try:
            with signals_interrupt():
                result = restart_mod.restart_serving(inv, str(inventory), name, events, inventory_doc=idoc,
                                                     options=opts)
        except (restart_mod.RestartRefused, restart_mod.RestartFailed, GroupError) as exc:
            events.result(False, error=str(exc))
            events.close()
            raise Failed(str(exc)) from exc
        down = [d.words() for d in result.down]
        events.result(True, release=result.release.id, endpoint=result.endpoint, plan_hash=result.release.plan_hash,
                      down=down)
        events.close()
        if not as_json:
            said = f" ({'; '.join(down)} before)" if down else ""
            out.print(f"[bold green]serving[/] release {result.release.id} again at {escape(result.endpoint)}/v1, "
                      f"restarted whole{escape(said)}")
