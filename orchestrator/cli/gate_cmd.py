"""`up RECIPE --gate`'s printing and exit codes (the gate itself: bench/gate.py): 0 kept, 1 rejected or
failed, 2 bad input (nothing to gate against, a bad option)."""

from __future__ import annotations

from rich.markup import escape
from rich.table import Table

from .common import BadInput, Failed, emit_json, err, out


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
