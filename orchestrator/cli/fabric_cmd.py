"""`fabric test`: the fabric's bandwidth per link and direction, and its latency; `--save` keeps the baseline."""

from __future__ import annotations

from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..bench import fabric as fabric_run
from ..config.load import load_inventory
from ..fabric.judge import DEFAULT_MIN_FRACTION, gbit
from ..fabric.measure import DEFAULT_SECONDS, MeasureError
from ..facts.fabric_perf import Method
from ..operation import OperationRefused
from ..releases.lock import LockError
from ..runner.events import Events
from ..runner.sinks import TerminalSink
from ..transport.cancel import signals_interrupt
from ..transport.group import GroupError
from ..transport.node import NodeError
from .common import ClusterOpt, Failed, InventoryOpt, JsonOpt, emit_json, err, exit_codes, out, FailedAsShown
from .conventions import sub_app

app = sub_app(help="The fabric measured: bandwidth per link both ways and latency, against a kept baseline.")


@app.command()
def test(
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    save: Annotated[bool, typer.Option("--save", help="Keep these figures as the cluster's baseline on every node "
                                                      "(preflight --fabric judges against it).")] = False,
    seconds: Annotated[float, typer.Option("--seconds", min=1, max=60,
                                           help="Seconds of traffic per direction of each link.")] = DEFAULT_SECONDS,
    method: Annotated[Optional[Method], typer.Option(
        "--method", help="rdma (ib_write_bw/ib_write_lat), iperf3, or stream (python3). Default: the best every "
                         "node has (rdma only with profile roce).", show_default=False)] = None,
    min_fraction: Annotated[float, typer.Option("--min-fraction", min=0.01, max=1.0,
                                                help="A direction below this fraction of its baseline fails.")]
    = DEFAULT_MIN_FRACTION,
    as_json: JsonOpt = False,
) -> None:
    """Measure every pair of nodes over their fabric addresses: bandwidth in both directions and latency,
    one direction at a time, each for --seconds. Servers started for it are stopped when it ends, also on
    Ctrl-C. Compared with the baseline the nodes hold, when there is one (exit 1 below --min-fraction of it).

    Example: spark-deploy fabric test --save
    """
    with exit_codes(as_json):
        inv, _ = load_inventory(inventory)
        events = Events(TerminalSink(err if as_json else out))
        try:
            with signals_interrupt():  # SIGTERM as Ctrl-C: the servers are killed on the way out
                run = fabric_run.test(inv, seconds=seconds, save=save, method=method, min_fraction=min_fraction,
                                      events=events)
        except (MeasureError, OperationRefused, LockError, NodeError, GroupError) as exc:
            raise Failed(str(exc)) from exc
        drops = run.judgment.drops if run.judgment else []
        if as_json:
            emit_json({"ok": not drops, "method": str(run.figures.method), "seconds": run.figures.seconds,
                       "saved": run.saved, "links": [lk.model_dump(mode="json") for lk in run.figures.links],
                       "drops": [c.said() for c in drops], "problems": run.problems})
        else:
            _print(run)
        if drops:
            raise FailedAsShown("; ".join(c.said() for c in drops))


def _print(run: fabric_run.FabricRun) -> None:
    figures = run.figures
    table = Table(title=f"fabric of {figures.cluster}: {figures.method}, {figures.seconds:g} s per direction")
    for column in ("link", "direction", "bandwidth", "baseline", "latency"):
        table.add_column(column)
    for link in figures.links:
        base = run.baseline.link(link.a, link.b) if run.baseline else None
        old = {d.name: d.gbit_s for d in base.directions} if base else {}
        lat = f"{link.latency_us:.1f} µs" if link.latency_us is not None else "-"
        for d in link.directions:
            table.add_row(escape(link.name), escape(d.name), gbit(d.gbit_s),
                          gbit(old[d.name]) if d.name in old else "-", lat)
    out.print(table)
    latency = {"rdma": "one way, ib_write_lat's typical", "iperf3": "TCP round trip, the kernel's mean",
               "stream": "TCP round trip of 1 byte"}[str(figures.method)]
    out.print(f"method: {figures.method}; latency: {latency}")
    if run.judgment and run.judgment.method_changed:
        out.print(f"[yellow]not compared[/]: {escape(run.judgment.method_changed)}")
    for c in (run.judgment.drops if run.judgment else []):
        out.print(f"[bold red]slower[/] {escape(c.said())}")
    for node, why in run.problems.items():
        out.print(f"[yellow]{escape(node)}[/]: {escape(why)}")
    if run.saved:
        out.print("[green]saved[/]: the baseline on every node")
