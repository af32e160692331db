"""`accept`: the acceptance checks against the serving release (thin: parse, call acceptance.command, print)."""
from __future__ import annotations

from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..acceptance import AcceptStatus, UnknownCheck
from ..acceptance.command import AcceptError, accept as run_accept
from .common import BadInput, ClusterOpt, Failed, InventoryOpt, JsonOpt, emit_json, exit_codes, out, FailedAsShown

COLOURS = {AcceptStatus.PASS: "green", AcceptStatus.FAIL: "red", AcceptStatus.CHANGED: "yellow",
           AcceptStatus.SKIP: "dim"}


def accept(
    recipe: Annotated[Optional[Path], typer.Argument(help="The recipe serving now (default: the serving "
                                                          "release's recorded recipe).", show_default=False)] = None,
    inventory: InventoryOpt = None,
    cluster: ClusterOpt = None,
    check: Annotated[Optional[list[str]], typer.Option("--check", help="Run only this check (repeatable).")] = None,
    as_json: JsonOpt = False,
) -> None:
    """Does the serving release answer correctly? Finite logprobs, greedy outputs against the previous
    release, a needle in a long prompt, tool calls, language, thinking; and the recipe's own checks.

    Example: spark-deploy accept --json
    """
    with exit_codes(as_json):
        def said(result) -> None:
            if not as_json:
                mark = " (advisory)" if result.advisory and result.status is AcceptStatus.FAIL else ""
                out.print(f"[{COLOURS[result.status]}]{result.status}{mark}[/] {escape(result.name)}: "
                          f"{escape(result.seen)}")
        try:
            report = run_accept(inventory, recipe, list(check) if check else None, on_result=said)
        except UnknownCheck as exc:
            raise BadInput(str(exc)) from exc
        except AcceptError as exc:
            raise Failed(str(exc)) from exc
        if as_json:
            emit_json(report.as_dict())
        else:
            out.print(f"release {report.release} ({escape(report.recipe)}) at {escape(report.endpoint)}: "
                      + ("[green]accepted[/]" if report.ok else "[red]NOT accepted[/]"))
        if not report.ok:
            raise FailedAsShown(f"release {report.release} ({report.recipe}) NOT accepted: "
                                + "; ".join(f"{r.name}: {r.seen}" for r in report.results if r.blocking))
