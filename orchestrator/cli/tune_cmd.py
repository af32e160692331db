"""`spark-deploy tune`: options, printing, the winner's recipe file and exit codes (the tune itself:
bench/tune.py). 0 done (the winner, or the original, serves), 1 a deploy or measurement failed, 2 bad input
(a bad --set, a value the recipe or the speculative-tokens lint refuses: nothing loaded)."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..config.load import load_deployment
from ..deploy.up import UpOptions
from .common import BadInput, ClusterOpt, Failed, InventoryOpt, JsonOpt, RecipeArg, emit_json, err, exit_codes, out
from .deploy_cmds import _signals_for_up


def tune(
    recipe: RecipeArg,
    set_: Annotated[list[str], typer.Option("--set", metavar="KEY=V1,V2,...", help="A dotted recipe key and the values to try "
                                                          "(repeatable: every combination is tried), e.g. "
                                                          "vllm.speculative_config.num_speculative_tokens=2,4,6,8.")],
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    profile: Annotated[str, typer.Option("--profile", help="The profiles measured (bench's prompt sets).")] = "code,chat",
    shots: Annotated[int, typer.Option("--shots", min=1, help="Kept shots per profile and block.")] = 6,
    rounds: Annotated[int, typer.Option("--rounds", min=1, help="Passes over the variants, every other one in "
                                                                "reverse order (balanced).")] = 2,
    max_tokens: Annotated[int, typer.Option("--max-tokens", min=2, help="Output length of a shot "
                                                                        "(ignore_eos).")] = 400,
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="The winner's recipe file (default: "
                                                                           "RECIPE's stem + -tuned.yaml).",
                                                   show_default=False)] = None,
    ready_timeout: Annotated[float, typer.Option(help="Seconds to wait for each variant's API to serve.")] = 5400.0,
    as_json: JsonOpt = False,
) -> None:
    """Deploy and bench every variant of a recipe in one operation, against a no-speculation baseline of the
    same run; print and save a per-profile table; leave the winner serving (the original when nothing beats
    it beyond the spread) and write it as a new recipe file with the table as comments (docs/tune.md).

    Example: spark-deploy tune recipe.yaml --set vllm.speculative_config.num_speculative_tokens=2,4,6,8 --profile code,chat
    """
    from ..bench import prompts as prompt_sets
    from ..bench import render_tune, runner, tune_plan
    from ..bench import tune as tune_mod
    from ..bench.compare import Seams
    from ..bench.shot import ShotOptions
    from ..runner.events import Events
    from ..runner.sinks import TerminalSink

    with _signals_for_up(), exit_codes(as_json):
        try:
            settings = [tune_plan.parse_set(s) for s in set_]
        except tune_plan.TuneInputError as exc:
            raise BadInput(str(exc)) from exc
        dep = load_deployment(recipe, inventory)
        try:
            variants = tune_plan.expand(dep.text(), settings)
            order = tune_plan.order(len(variants), rounds, last=next(i for i, v in enumerate(variants) if v.original))
            sets = prompt_sets.select([p.strip() for p in profile.split(",") if p.strip()], None)
        except (tune_plan.TuneInputError, prompt_sets.PromptError, ValueError) as exc:
            raise BadInput(str(exc)) from exc
        dest = output or recipe.with_name(recipe.stem + "-tuned.yaml")
        if dest.resolve() == recipe.resolve():
            raise BadInput(f"-o {dest}: would overwrite the recipe being tuned")
        if not dest.parent.is_dir():
            raise BadInput(f"-o {dest}: no directory {dest.parent}")

        def plan_of(tgt):
            return runner.Plan(prompts=sets, shots=shots, warmup=1, concurrency=(1,), until_stable=None,
                               max_shots=shots, draft_budget=tgt.draft_budget, shot=ShotOptions(max_tokens=max_tokens))

        try:
            result = tune_mod.tune(dep, variants, order, plan_of, Events(TerminalSink(err)),
                                   seams=Seams(options=UpOptions(ready_timeout=ready_timeout)))
        except tune_mod.TuneRefused as exc:
            raise BadInput(str(exc)) from exc
        except tune_mod.TuneError as exc:
            raise Failed(str(exc)) from exc
        command = " ".join(shlex.quote(a) for a in ["spark-deploy", *sys.argv[1:]]) if sys.argv else "spark-deploy tune"
        won = result.variants[result.winner.variant]
        dest.write_text(render_tune.as_comments(result, command) + won.text)
        if as_json:
            emit_json({**result.as_dict(), "output": str(dest)})
        else:
            for line in render_tune.lines(result):
                out.print(escape(line))
        err.print(f"{escape(result.serving)}; the winner's recipe: {escape(str(dest))}")
