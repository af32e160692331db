"""`bench`: measure decode speed the way the field notes say (14-21), with acceptance and the ceiling."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..interrupts import interrupt_reason
from ..verbosity import Verbosity, level
from .common import (
    BadInput,
    Failed,
    ClusterOpt, InventoryOpt,
    JsonOpt,
    SetOpt,
    emit_json,
    err,
    exit_codes,
    out,
)


def _ints(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise BadInput(f"{option} {text!r}: want comma-separated whole numbers, e.g. 1,12") from None
    if not values or min(values) < 1:
        raise BadInput(f"{option} {text!r}: every level must be >= 1")
    return values


def _width(text: str) -> float:
    try:
        w = float(text[:-1]) / 100 if text.endswith("%") else float(text)
    except ValueError:
        raise BadInput(f"--until-stable {text!r}: want a relative width, e.g. 0.05 or 5%") from None
    if not 0 < w < 1:
        raise BadInput(f"--until-stable {text!r}: the width must be between 0 and 1 (e.g. 0.05 = 5%)")
    return w


def bench(
    recipe: Annotated[Optional[Path], typer.Argument(help="The recipe whose serving release to measure.",
                                                     show_default=False)] = None,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    url: Annotated[Optional[str], typer.Option("--url", help="Any OpenAI-compatible server (no cluster).")] = None,
    model: Annotated[Optional[str], typer.Option("--model", help="Served model name (with --url; default: the "
                                                                 "server's only model).")] = None,
    profile: Annotated[str, typer.Option("--profile", help="Bundled prompt sets: code,prose,zh,chat "
                                                           "(or names in --prompts FILE).")] = "",
    prompts_file: Annotated[Optional[Path], typer.Option("--prompts", help="Your prompts: text with --- "
                                                                           "separators, or JSON by profile.")] = None,
    shots: Annotated[int, typer.Option("--shots", help="Kept shots per profile and level.")] = 10,
    max_tokens: Annotated[int, typer.Option("--max-tokens", help="Output length (ignore_eos).")] = 800,
    concurrency: Annotated[str, typer.Option("--concurrency", help="Levels, e.g. 1,12.")] = "1",
    warmup: Annotated[int, typer.Option("--warmup", help="Warm-up shots per group, not counted.")] = 1,
    until_stable: Annotated[Optional[str], typer.Option("--until-stable", help="Shoot until the median's 95% CI "
                                                        "is this wide (relative: 0.05 or 5%).")] = None,
    max_shots: Annotated[int, typer.Option("--max-shots", help="Bound on kept shots with --until-stable.")] = 40,
    api: Annotated[str, typer.Option("--api", help="chat (/v1/chat/completions) or completions.")] = "chat",
    bandwidth: Annotated[float, typer.Option("--bandwidth", help="Memory bandwidth per node, GB/s "
                                                                 "(GB10: 273).")] = 273.0,
    idle_bound: Annotated[float, typer.Option("--idle-bound", help="Seconds to wait for an idle server "
                                                                   "before a shot.")] = 30.0,
    compare: Annotated[Optional[tuple[Path, Path]], typer.Option("--compare", help="A.yaml B.yaml: deploy each in "
                                                                 "turn, interleaved blocks, B/A and drift.")] = None,
    blocks: Annotated[str, typer.Option("--blocks", help="Block order with --compare.")] = "ABAB",
    same_engine_ok: Annotated[bool, typer.Option("--same-engine-ok", help="With --compare: measure A and B even "
                                                 "when they give the engine the same input.")] = False,
    replicates: Annotated[Optional[int], typer.Option("--replicates", help="With a recipe: N >= 2 sittings, the "
                                                      "release restarted between them; a capacity figure per "
                                                      "profile.")] = None,
    no_record: Annotated[bool, typer.Option("--no-record", help="With a recipe: do not record the results "
                                                                "with the serving release.")] = False,
    overrides: SetOpt = None,
    as_json: JsonOpt = False,
    report_dir: Annotated[Optional[Path], typer.Option("--report", help="Write bench.json and bench.png here.")] = None,
) -> None:
    """Measure decode tok/s (median, spread), acceptance per step, saturation and the physical ceiling.

    Example: spark-deploy bench recipes/dspark-0731-b12x.yaml --profile code,zh --shots 10 --concurrency 1,12
    Example: spark-deploy bench --url http://127.0.0.1:8000 --profile prose --until-stable 5% --json
    Example: spark-deploy bench --compare baseline.yaml spec.yaml --blocks ABAB -i inventory.yaml
    Example: spark-deploy bench recipes/dspark-0731-b12x.yaml --replicates 4 --profile code --shots 5
    """
    from ..bench import prompts as prompt_sets
    from ..bench import render, report, runner
    from ..bench import target as target_mod
    from ..bench.client import Api, RequestFailed, models, open_client
    from ..bench.metrics import MetricsError
    from ..bench.shot import ShotOptions

    with exit_codes(as_json):
        if sum(x is not None for x in (recipe, url, compare)) != 1:
            raise BadInput("give one of: a RECIPE (its serving release is measured), --url URL, "
                           "or --compare A.yaml B.yaml")
        if shots < 1 or max_tokens < 2 or warmup < 0 or max_shots < 1:
            raise BadInput("--shots and --max-shots must be >= 1, --max-tokens >= 2, --warmup >= 0")
        if bandwidth <= 0:
            raise BadInput("--bandwidth must be > 0 (GB/s)")
        try:
            the_api = Api(api)
        except ValueError:
            raise BadInput(f"--api {api!r}: choose chat or completions") from None
        if overrides and recipe is None and compare is None:
            raise BadInput("--set changes a recipe: give a RECIPE (or --compare A B: it changes B), not --url")
        if replicates is not None and (recipe is None or replicates < 2):
            raise BadInput("--replicates N needs a RECIPE (its serving release is restarted between replicates) "
                           "and N >= 2")
        levels = _ints(concurrency, "--concurrency")
        width = _width(until_stable) if until_stable is not None else None
        names = [p.strip() for p in profile.split(",") if p.strip()]
        if prompts_file is not None and not prompts_file.is_file():
            raise BadInput(f"--prompts {prompts_file}: no such file")
        try:
            sets = prompt_sets.select(names, prompts_file)
        except prompt_sets.PromptError as exc:
            raise BadInput(str(exc)) from exc

        if compare is not None:
            _compare(compare, blocks, inventory, sets, shots, warmup, levels, width, max_shots, the_api, max_tokens,
                     idle_bound, as_json, report_dir, no_record, same_engine_ok, overrides or ())
            return
        if recipe is not None:
            from ..config.load import load_deployment

            dep = load_deployment(recipe, inventory, overrides or ())
            if replicates is not None:
                _replicates(dep, replicates, sets, shots, warmup, levels, width, max_shots, the_api, max_tokens,
                            idle_bound, as_json, report_dir, no_record)
                return
            try:
                tgt = target_mod.of_recipe(dep)
            except target_mod.TargetError as exc:
                raise Failed(str(exc)) from exc
        else:
            if not url.startswith(("http://", "https://")):
                raise BadInput(f"--url {url!r}: want http://HOST:PORT")
            tgt = target_mod.Target(url=url.rstrip("/"), model=model or "")
        http = open_client(tgt.url)
        try:
            if not tgt.model:
                try:
                    served = models(http)
                except RequestFailed as exc:
                    raise Failed(f"{tgt.url}: {exc}") from exc
                if len(served) != 1:
                    raise BadInput(f"{tgt.url} serves {served or 'no models'}: name one with --model")
                tgt.model = served[0]
            plan = runner.Plan(prompts=sets, shots=shots, warmup=warmup, concurrency=levels, until_stable=width,
                               max_shots=max_shots, draft_budget=tgt.draft_budget,
                               shot=ShotOptions(api=the_api, max_tokens=max_tokens, idle_bound_s=idle_bound))
            result = report.BenchResult(target={**tgt.as_dict(), "api": str(the_api)}, plan=plan, groups=[])
            if tgt.headers is not None:
                result.ceiling_input = report.CeilingInput(tgt.headers, tgt.nodes, bandwidth * 1e9)
            result.ceiling_error = tgt.headers_error
            taken: list = []  # the groups as they are shot: what an interrupt leaves is kept and recorded
            try:
                _shoot(http, tgt.model, plan, quiet=as_json, groups=taken)
            except (RequestFailed, MetricsError) as exc:
                raise Failed(f"{tgt.url}: {exc}") from exc
            except KeyboardInterrupt as exc:
                result.interrupted = interrupt_reason(exc)
            result.groups = runner.interrupted(taken, result.interrupted) if result.interrupted else taken
            result.finished_at = time.time()
        finally:
            http.close()
        if as_json:
            emit_json(result.as_dict())
        else:
            render.show(out, result)
        if report_dir is not None:
            path, png, why = report.write(result, report_dir)
            (err if as_json else out).print(f"report: {escape(str(path))}"
                                            + (f", {escape(str(png))}" if png else f" ({escape(why or '')})"))
        kept = sum(len(g.kept) for g in result.groups)
        if not kept:
            raise Failed(f"{result.interrupted}: no shot was kept yet, nothing recorded" if result.interrupted
                         else "no shot was kept: every one was discarded (see the reasons above)")
        if recipe is not None and not no_record and tgt.release is not None:
            from ..bench.record import NotRecorded, record

            try:
                record(result, dep.inventory, tgt.release, err)
                err.print(f"recorded with release {tgt.release}" + (" as interrupted" if result.interrupted else "")
                          + " (`spark-deploy history` shows the headline)")
            except NotRecorded as exc:
                err.print(f"[yellow]warning[/]: {escape(str(exc))}")
        if result.interrupted:  # exit 130/143 (common.exit_codes): stopped, with the figures of the shots taken
            raise Failed(f"{result.interrupted} after {kept} kept shot(s): the figures above are of those")


def _shoot(http, model: str, plan, quiet: bool, groups: list):
    """Run the plan with a progress bar over shots (on stderr, so --json stays clean), into `groups`."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        TextColumn,
        TimeElapsedColumn,
    )

    from ..bench import runner

    per_group = plan.max_shots if plan.until_stable else plan.shots
    total = len(plan.prompts) * len(plan.concurrency) * (per_group + plan.warmup)
    with Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                  console=err, disable=quiet or level() is Verbosity.QUIET or not err.is_terminal,
                  transient=True) as bar:
        task = bar.add_task("shots", total=total)

        def on_shot(group, shot) -> None:
            bar.update(task, advance=1, description=f"{group.profile} c={group.concurrency}")

        return runner.run(http, model, plan, on_shot, groups)


def _compare(paths, blocks_text: str, inventory: Path, sets, shots, warmup, levels, width, max_shots, the_api,
             max_tokens, idle_bound, as_json: bool, report_dir, no_record: bool, same_engine_ok: bool = False,
             overrides=()) -> None:
    """--compare A.yaml B.yaml: both recipes on the same inventory, blocks in order, then the restore; `--set`
    changes B (the candidate), so `--compare r.yaml r.yaml --set name=r-8k --set ...` tries one change."""
    import json

    from ..bench import compare as compare_mod
    from ..bench import render, runner
    from ..bench.shot import ShotOptions
    from ..config.load import load_deployment, load_recipe_on
    from ..runner.events import Events
    from ..runner.sinks import TerminalSink

    try:
        order = compare_mod.parse_blocks(blocks_text)
    except ValueError as exc:
        raise BadInput(str(exc)) from exc
    a = load_deployment(paths[0], inventory)
    deps = {"A": a, "B": load_recipe_on(paths[1], a, overrides)}  # one inventory, parsed once
    if deps["A"].recipe.name == deps["B"].recipe.name:
        raise BadInput(f"--compare: {paths[0]} and {paths[1]} are both recipe {deps['A'].recipe.name!r}: "
                       "give the variants different names, so their releases can be told apart")
    from ..bench.same_engine import same_engine

    same = same_engine(deps["A"], deps["B"])
    if same is not None and not same_engine_ok:
        raise BadInput(f"--compare {paths[0]} {paths[1]}: {same.message()}")

    def plan_of(tgt):
        return runner.Plan(prompts=sets, shots=shots, warmup=warmup, concurrency=levels, until_stable=width,
                           max_shots=max_shots, draft_budget=tgt.draft_budget,
                           shot=ShotOptions(api=the_api, max_tokens=max_tokens, idle_bound_s=idle_bound))

    def record_block(tgt, plan, groups) -> None:
        from ..bench.record import NotRecorded, record
        from ..bench.report import BenchResult

        if no_record or tgt.release is None:
            return
        block = BenchResult(target={**tgt.as_dict(), "api": str(the_api)}, plan=plan, groups=groups,
                            finished_at=time.time())
        try:
            record(block, deps["A"].inventory, tgt.release, err)
        except NotRecorded as exc:
            err.print(f"[yellow]warning[/]: {escape(str(exc))}")

    try:
        result = compare_mod.compare(deps, str(inventory), order, plan_of, Events(TerminalSink(err)),
                                     on_block=record_block)
    except compare_mod.CompareError as exc:
        raise Failed(str(exc)) from exc
    if as_json:
        emit_json(result.as_dict())
    else:
        render.show_compare(out, result)
    if report_dir is not None:
        report_dir.mkdir(parents=True, exist_ok=True)
        path = report_dir / "compare.json"
        path.write_text(json.dumps(result.as_dict(), indent=2, default=str) + "\n")
        (err if as_json else out).print(f"report: {escape(str(path))}")


def _replicates(dep, n: int, sets, shots, warmup, levels, width, max_shots, the_api, max_tokens, idle_bound,
                as_json: bool, report_dir, no_record: bool) -> None:
    """--replicates N: N sittings of the serving release, restarted between them, in one operation."""
    import json

    from ..bench import render_replicates, runner
    from ..bench import replicates as replicates_mod
    from ..bench.record import NotRecorded, record
    from ..bench.report import BenchResult
    from ..bench.shot import ShotOptions
    from ..runner.events import Events
    from ..runner.sinks import TerminalSink

    def plan_of(tgt):
        return runner.Plan(prompts=sets, shots=shots, warmup=warmup, concurrency=levels, until_stable=width,
                           max_shots=max_shots, draft_budget=tgt.draft_budget,
                           shot=ShotOptions(api=the_api, max_tokens=max_tokens, idle_bound_s=idle_bound))

    def record_it(tgt, plan, result) -> str:
        if no_record:
            return ""
        last = BenchResult(target={**tgt.as_dict(), "api": str(the_api)}, plan=plan,
                           groups=result.replicates[-1].groups, finished_at=time.time())
        try:
            record(last, dep.inventory, tgt.release, err, replicates=result.recorded())
        except NotRecorded as exc:
            err.print(f"[yellow]warning[/]: {escape(str(exc))}")
            return f"not recorded: {exc}"
        return f"recorded with release {tgt.release}"

    try:
        result = replicates_mod.measure(dep, n, plan_of, Events(TerminalSink(err)), on_done=record_it)
    except replicates_mod.ReplicatesError as exc:
        raise Failed(str(exc)) from exc
    if as_json:
        emit_json(result.as_dict())
    else:
        render_replicates.show(out, result)
    if report_dir is not None:
        report_dir.mkdir(parents=True, exist_ok=True)
        path = report_dir / "replicates.json"
        path.write_text(json.dumps(result.as_dict(), indent=2, default=str) + "\n")
        (err if as_json else out).print(f"report: {escape(str(path))}")
