"""`watch`: the serving release, live; exits 1 when a rank is gone or cannot be observed, the endpoint stops
generating, free memory crosses the reserve, or the nodes run another plan than the release's (thin:
watching/ does it)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.live import Live
from rich.markup import escape

from ..config.load import load_deployment
from ..watching.loop import watch as run_watch
from ..watching.sample import WatchError
from ..watching.view import render
from .common import ClusterOpt, Failed, InventoryOpt, JsonOpt, emit_json, err, exit_codes, out, stream_json, FailedAsShown

def watch(
    recipe: Annotated[Optional[Path], typer.Argument(help="Watch this recipe's release (default: the one the "
                                                          "records say serves).", show_default=False)] = None,
    inventory: InventoryOpt = None,
    cluster: ClusterOpt = None,
    interval: Annotated[float, typer.Option("--interval", min=0.5, help="Seconds between samples.")] = 5.0,
    once: Annotated[bool, typer.Option("--once", help="One sample, then exit (0 ok, 1 a problem).")] = False,
    textfile: Annotated[Optional[Path], typer.Option("--textfile", help="Write each sample as Prometheus text here "
                                                                        "(node_exporter's textfile collector).")] = None,
    capacity_samples: Annotated[int, typer.Option("--capacity-samples", min=1, help="Warn when live decode sits "
                                                  "below the release's capacity figure (bench --replicates) for "
                                                  "this many samples in a row.")] = 3,
    as_json: JsonOpt = False,
) -> None:
    """Watch the serving release: each rank, each node's MemAvailable and SM clock, requests, KV use, tok/s.

    Exits 1 at the first sample with a problem (for cron, a systemd timer, an alert); --json prints one
    JSON object per sample (one line each), the last line the result object with the last sample (with
    --once, that one object). When the release has a capacity
    figure (bench --replicates), live decode below it for --capacity-samples samples in a row is a warning.

    Example: spark-deploy watch --once --json
    """
    with exit_codes(as_json):
        dep = load_deployment(recipe, inventory) if recipe else None
        name = dep.recipe.name if dep else None
        reserve = dep.recipe.preflight.memory_reserve_gib if dep else None

        def show_json(sample) -> None:
            if not once:  # a stream: one compact object per sample, then the envelope with the last one
                stream_json(sample.as_dict())
            emit_json(sample.as_dict())

        try:
            if as_json or once:
                last = run_watch(inventory, name, interval=interval, once=once, reserve_gib=reserve,
                                 capacity_samples=capacity_samples,
                                 textfile_path=str(textfile) if textfile else None,
                                 show=show_json if as_json else lambda s: out.print(render(s)))
            else:
                with Live(console=out, auto_refresh=False) as live:
                    last = run_watch(inventory, name, interval=interval, once=False, reserve_gib=reserve,
                                     capacity_samples=capacity_samples,
                                     textfile_path=str(textfile) if textfile else None,
                                     show=lambda s: live.update(render(s), refresh=True))
        except WatchError as exc:
            raise Failed(str(exc)) from exc
        if as_json:  # the view printed them already; JSON on stdout gets them said on stderr, once
            for problem in last.problems:
                err.print(f"[red]problem[/]: {escape(problem)}")
        if last.problems:
            raise FailedAsShown("; ".join(last.problems))
