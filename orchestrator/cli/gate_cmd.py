"""`up RECIPE --gate`'s printing and exit codes (the gate itself: bench/gate.py): 0 kept, 1 rejected or
failed, 2 bad input (nothing to gate against, a bad option)."""

from __future__ import annotations

from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from .common import BadInput, Failed, emit_json, err, out

# The gate's options, one definition for `up` and `upgrade` (both deploy a candidate B against what serves).
GateFlag = Annotated[bool, typer.Option("--gate", help="Keep the new release only if it measures no slower than "
                                                       "the serving one (interleaved bench blocks; docs/bench.md); "
                                                       "exit 1 and the serving one again if not.")]
GateProfileOpt = Annotated[str, typer.Option("--profile", help="With --gate: the profiles judged (bench's prompt "
                                                               "sets, e.g. code,zh).")]
GateShotsOpt = Annotated[int, typer.Option("--shots", min=1, help="With --gate: kept shots per profile and block.")]
GateToleranceOpt = Annotated[float, typer.Option("--tolerance", min=0.0, max=0.99,
                                                 help="With --gate: B/A may be this much below 1 when the measured "
                                                      "spread is smaller.")]
GateBlocksOpt = Annotated[str, typer.Option("--blocks", help="With --gate: block order, A the serving release, B "
                                                             "RECIPE.")]
GateMaxTokensOpt = Annotated[int, typer.Option("--max-tokens", min=2, help="With --gate: output length of a shot "
                                                                           "(ignore_eos).")]
GATE_DEFAULTS = {"profile": "", "shots": 10, "tolerance": 0.03, "blocks": "ABAB", "max_tokens": 800}


def refuse_gate_options_without_gate(gate: bool, **given) -> None:
    """A gate option without --gate is a mistake, never silently ignored (bad input, exit 2)."""
    named = [f"--{k.replace('_', '-')}" for k, v in given.items() if v != GATE_DEFAULTS[k]]
    if not gate and named:
        raise BadInput(", ".join(named) + " only go with --gate")


def run_gate(dep, inventory_path: str, opts, *, profile: str, shots: int, tolerance: float, blocks: str,
             max_tokens: int, as_json: bool) -> None:
    from ..bench import compare as compare_mod
    from ..bench import gate as gate_mod
    from ..bench import prompts as prompt_sets
    from ..bench import runner
    from ..bench.gate_rule import GateVerdict
    from ..bench.shot import ShotOptions
    from ..runner.events import Events
    from ..runner.sinks import TerminalSink

    try:
        order = compare_mod.parse_blocks(blocks)
        sets = prompt_sets.select([p.strip() for p in profile.split(",") if p.strip()], None)
    except ValueError as exc:
        raise BadInput(str(exc)) from exc
    except prompt_sets.PromptError as exc:
        raise BadInput(str(exc)) from exc

    def plan_of(tgt):
        return runner.Plan(prompts=sets, shots=shots, warmup=1, concurrency=(1,), until_stable=None,
                           max_shots=shots, draft_budget=tgt.draft_budget, shot=ShotOptions(max_tokens=max_tokens))

    try:
        result = gate_mod.gate(dep, inventory_path, order, plan_of, tolerance, Events(TerminalSink(err)),
                               seams=compare_mod.Seams(options=opts))
    except gate_mod.GateRefused as exc:
        raise BadInput(str(exc)) from exc
    except gate_mod.GateError as exc:
        raise Failed(str(exc)) from exc
    if as_json:
        emit_json(result.as_dict())
    else:
        _show(result)
    if result.verdict is not GateVerdict.KEPT:
        raise Failed(f"rejected release {result.release} ({result.candidate}) against release {result.against}: "
                     f"{result.reason}; {result.serving}")
    err.print(f"kept release {result.release}: {result.serving}")


def _show(result) -> None:
    table = Table(title=f"gate: B {result.candidate} (release {result.release}) vs A release {result.against}")
    for column in ("profile", "A tok/s", "B tok/s", "B/A", "interval", "spread", "bound", "verdict"):
        table.add_column(column)
    for j in result.judgments:
        span = f"{j.interval[0]:.3f}-{j.interval[1]:.3f} ({j.interval_kind})" if j.interval else "-"
        num = (lambda v, f: "-" if v is None else format(v, f))
        table.add_row(j.profile, num(j.a, ".1f"), num(j.b, ".1f"), num(j.ratio, ".3f"), span,
                      f"{j.spread:.1%}", f"{j.bound:.3f}", str(j.verdict))
    out.print(table)
    out.print(f"{result.verdict}: {escape(result.reason or 'every profile within its bound')}")
