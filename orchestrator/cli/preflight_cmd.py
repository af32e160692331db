"""`preflight`: every registered check, one row per check and one column per node."""

from __future__ import annotations

from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..config.load import load_deployment
from ..render.plan import build_plan
from ..transport.group import Cluster
from .common import BadInput, ClusterOpt, InventoryOpt, JsonOpt, RecipeArg, emit_json, exit_codes, out, FailedAsShown, only_node

_STYLE = {"ok": "green", "warn": "yellow", "fail": "bold red", "skip": "dim"}


def preflight(
    recipe: RecipeArg,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    only: Annotated[Optional[list[str]], typer.Option("--only", help="Run only this check (repeatable).")] = None,
    skip: Annotated[Optional[list[str]], typer.Option("--skip", help="Leave this check out (repeatable).")] = None,
    strict: Annotated[bool, typer.Option("--strict", help="Warnings fail too.")] = False,
    verify_blobs: Annotated[bool, typer.Option(
        "--verify-blobs", help="Also hash every model blob on every node (reads all the weights: minutes).")] = False,
    fabric: Annotated[bool, typer.Option(
        "--fabric", help="Also measure the fabric (a few seconds per link and direction) and fail below "
                         "--fabric-min of the baseline `fabric test --save` kept.")] = False,
    fabric_min: Annotated[float, typer.Option("--fabric-min", min=0.01, max=1.0,
                                              help="With --fabric: the fraction of the baseline a direction "
                                                   "must reach.")] = 0.8,
    as_json: JsonOpt = False,
) -> None:
    """Check every node for the failures the field notes name (docs/field-notes.md), before a 20-70 minute load.
    Read only.

    Example: spark-deploy preflight recipes/dspark-0731-b12x.yaml --strict
    """
    from .. import preflight as registry  # registers the checks

    with exit_codes(as_json):
        dep = load_deployment(recipe, inventory)
        try:
            include = (["model-blobs"] if verify_blobs else []) + (["fabric-speed"] if fabric else [])
            specs = registry.select(only, skip, include=include or None)
        except registry.UnknownCheck as exc:
            raise BadInput(str(exc)) from exc
        specs = [replace(s, probe=partial(s.probe, min_fraction=fabric_min)) if s.name == "fabric-speed" else s
                 for s in specs]
        cluster = Cluster(dep.inventory)
        try:
            report = registry.run_checks(dep, build_plan(dep), cluster, specs)
        finally:
            cluster.close()
        if as_json:
            emit_json(report.as_dict())
        else:
            table = Table(title=f"preflight: {dep.recipe.name} on {dep.inventory.cluster}")
            table.add_column("check")
            for node in report.nodes:
                table.add_column(node, overflow="fold")
            for v in report.verdicts:
                values = {c.value for c in v.cells.values()}
                row = []
                for node in report.nodes:
                    cell = v.cells.get(node)
                    if cell is None:
                        row.append("-")
                        continue
                    text = f"[{_STYLE[str(cell.status)]}]{escape(str(cell.status))}[/] {escape(cell.value)}"
                    row.append(f"[reverse]{text}[/]" if len(values) > 1 and v.scope.value == "parity" else text)
                table.add_row(escape(v.name), *row)
            out.print(table)
            for v in report.failed(strict):
                out.print(f"[bold red]{escape(v.name)}[/] ({', '.join(v.failed_nodes(strict))}): {escape(v.fix)}")
        if not report.ok(strict):
            failed = report.failed(strict)
            raise FailedAsShown("; ".join(f"{v.name} ({', '.join(v.failed_nodes(strict))}): {v.fix}" for v in failed),
                                node=only_node(n for v in failed for n in v.failed_nodes(strict)))
