"""`up`, `down`, `status`, `logs`: thin wrappers over orchestrator.deploy."""

from __future__ import annotations

import signal
import threading
from pathlib import Path
from contextlib import contextmanager
from typing import Annotated, Callable, Iterator, Optional

import typer
from rich.markup import escape
from rich.table import Table

from ..config.load import load_deployment, load_inventory
from ..deploy import kv_report
from ..deploy import logs as logs_mod
from ..deploy import status as status_mod
from ..deploy.status import PROBE_TIMEOUT
from ..deploy import down as down_mod
from ..docker_cli.image_sync import STALL_TIMEOUT
from ..deploy.up import DeployFailed, UnpinnedImage, UpOptions, UpResult, up as run_up
from .. import preflight as preflight_registry
from ..releases.lock import LockError
from ..runner.events import Events
from ..runner.sinks import JsonSink, TerminalSink
from ..transport.cancel import signals_interrupt
from ..verbosity import Verbosity, level
from ..transport.group import Cluster, GroupError
from .gate_cmd import (GateBlocksOpt, GateFlag, GateMaxTokensOpt, GateProfileOpt, GateShotsOpt, GateToleranceOpt,
                       refuse_gate_options_without_gate, run_gate)
from .common import (BadInput, ClusterOpt, Failed, InventoryOpt, JsonLines, JsonOpt, NodeOpt, RecipeArg, SetOpt,
                     YesOpt, can_ask, emit_json, err, exit_codes, out, FailedAsShown, only_node)

OptionalRecipe = Annotated[Optional[Path], typer.Argument(help="Limit to this recipe's containers.", show_default=False)]


@contextmanager
def _signals_for_up() -> Iterator[None]:
    """Inside: SIGINT/SIGTERM unwind `up` (undo, then one error), named as what they were. Outside, until the
    command ends: ignored, because the outcome is decided and a late second Ctrl-C must not lose its
    message. signals_interrupt() restores what it found — SIG_IGN, set first — and the command's end
    restores the real previous handlers."""
    signals = (signal.SIGINT, signal.SIGTERM)
    previous = {sig: signal.getsignal(sig) for sig in signals}
    for sig in signals:
        signal.signal(sig, signal.SIG_IGN)
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)


def _events(as_json: bool) -> Events:
    return Events(JsonSink(JsonLines()) if as_json else TerminalSink(out))


def up(
    recipe: RecipeArg,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    redeploy: Annotated[bool, typer.Option("--redeploy", help="Deploy again even if this exact plan is already "
                                                              "serving.")] = False,
    keep_on_failure: Annotated[bool, typer.Option("--keep-on-failure", help="Leave containers for debugging.")] = False,
    sync_image: Annotated[bool, typer.Option("--sync", help="Replace a different image held under the same reference.")] = False,
    ready_timeout: Annotated[float, typer.Option(help="Seconds to wait for the API to serve.")] = 5400.0,
    join_timeout: Annotated[float, typer.Option("--join-timeout", min=1,
                                                help="Seconds for every peer to join the head's rendezvous.")] = 120.0,
    heartbeat: Annotated[float, typer.Option("--heartbeat", min=0.1,
                                             help="Seconds between 'still waiting' lines during long waits.")] = 30.0,
    stall_warning: Annotated[float, typer.Option("--stall-warning", min=0.1,
                                                 help="Warn when no node has logged anything for this many seconds.")] = 300.0,
    copy_stall_timeout: Annotated[float, typer.Option("--copy-stall-timeout", min=1,
                                                      help="Seconds an image copy may move no byte before it "
                                                           "fails.")] = STALL_TIMEOUT,
    no_restore: Annotated[bool, typer.Option("--no-restore", help="If it fails, leave the nodes empty instead of "
                                                                  "starting the previous release again.")] = False,
    no_accept: Annotated[bool, typer.Option("--no-accept", help="Skip the acceptance checks after readiness "
                                                                "(docs/acceptance.md).")] = False,
    skip_check: Annotated[Optional[list[str]], typer.Option("--skip-check", help="Leave this preflight check out "
                                                                               "(repeatable; the rare override; "
                                                                               "vllm-flags also leaves out the "
                                                                               "offline flag check).")] = None,
    sync_model: Annotated[bool, typer.Option("--sync-model", help="First copy the model's missing or damaged blobs "
                                             "to the nodes that lack them (what `model pull` does; can be "
                                             "hundreds of GB).")] = False,
    gate: GateFlag = False,
    profile: GateProfileOpt = "",
    shots: GateShotsOpt = 10,
    tolerance: GateToleranceOpt = 0.03,
    blocks: GateBlocksOpt = "ABAB",
    max_tokens: GateMaxTokensOpt = 800,
    overrides: SetOpt = None,
    as_json: JsonOpt = False,
) -> None:
    """Deploy a recipe: preflight, image sync, stop the previous (kept), head, wait LISTEN, peers, ready, log checks,
    the facts after ready and the acceptance checks.

    Example: spark-deploy up recipes/dspark-0731-b12x.yaml -i inventory.yaml
    Example: spark-deploy up candidate.yaml --gate --profile code,zh --shots 10 --tolerance 0.03
    Example: spark-deploy up recipes/dspark-0731-b12x.yaml --set vllm.max_model_len=8192
    """
    with _signals_for_up(), exit_codes(as_json):
        refuse_gate_options_without_gate(gate, profile=profile, shots=shots, tolerance=tolerance, blocks=blocks,
                                         max_tokens=max_tokens)
        dep = load_deployment(recipe, inventory, overrides or ())
        events = _events(as_json)
        opts = UpOptions(force=redeploy, keep_on_failure=keep_on_failure, replace_image=sync_image,
                         ready_timeout=ready_timeout, join_timeout=join_timeout, heartbeat=heartbeat,
                         stall_warning=stall_warning, restore=not no_restore, skip_checks=list(skip_check or []),
                         copy_stall_timeout=copy_stall_timeout, sync_model=sync_model,
                         accept=not no_accept)
        try:
            preflight_registry.select(skip=opts.skip_checks)
        except preflight_registry.UnknownCheck as exc:
            raise BadInput(str(exc)) from exc
        if gate:
            run_gate(dep, str(inventory), opts, profile=profile, shots=shots, tolerance=tolerance, blocks=blocks,
                     max_tokens=max_tokens, as_json=as_json)
            return
        _up_and_report(lambda: run_up(dep, events, opts), events, as_json)


def _up_and_report(start: Callable[[], UpResult], events: Events, as_json: bool) -> None:
    """Run one release start (`up` itself, or a rollback's) with Ctrl-C/SIGTERM as interrupts, and report it."""
    try:
        with signals_interrupt():
            result = start()
    except UnpinnedImage as exc:
        raise BadInput(str(exc)) from exc
    except DeployFailed as exc:
        events.result(False, phase=str(exc.phase) if exc.phase else None, nodes=exc.nodes, error=str(exc),
                      restored=exc.restored, restore_failed=exc.restore_failed, repair=exc.repair)
        events.close()
        raise Failed(str(exc)) from exc
    timings = events.timings()
    events.result(True, endpoint=result.endpoint, model=result.model, plan_hash=result.plan_hash,
                  run=result.run_id, already_serving=result.already_serving, phases=timings,
                  release=result.release, replaced=result.replaced,
                  expectations=[{"name": r.name, "status": r.status, "per_node": r.per_node}
                                for r in result.expectations],
                  acceptance=[r.as_dict() for r in result.acceptance], after_ready=result.after_ready)
    events.close()
    if as_json:
        return
    if result.already_serving:
        out.print(f"[green]already serving[/] {escape(result.model)} at {escape(result.endpoint)} "
                  f"(plan {result.plan_hash})")
        return
    replaced = f", replaces release {result.replaced}" if result.replaced else ""
    out.print(f"[bold green]serving[/] {escape(result.model)} at {escape(result.endpoint)}/v1 (release "
              f"{result.release}, plan {result.plan_hash}{replaced})")
    if level() is not Verbosity.QUIET:  # -q: the result line only
        out.print("  " + ", ".join(f"{name} {seconds:.2f}s" for name, seconds in timings.items()))


def _cluster(inventory: Path) -> tuple[Cluster, object]:
    inv, _ = load_inventory(inventory)
    cluster = Cluster(inv)
    try:
        cluster.open()
    except GroupError as exc:
        raise Failed(str(exc)) from exc
    return cluster, inv


def _recipe_name(recipe: Path | None, inventory: Path) -> str | None:
    return load_deployment(recipe, inventory).recipe.name if recipe else None


def down(
    recipe: OptionalRecipe = None,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    all_recipes: Annotated[bool, typer.Option("--all", help="Without RECIPE: stop every recipe's containers, "
                                                            "however many run (else it asks when several do).")] = False,
    yes: YesOpt = False,
    as_json: JsonOpt = False,
) -> None:
    """Stop and remove this tool's containers (peers first, then the head) on every node it can reach.

    The kept (stopped) containers of earlier releases go too; it says which: a `rollback` to one of them
    re-creates its containers instead of starting them.

    Without RECIPE, when more than one recipe runs, it asks first (--yes or --all: it does not ask).

    \b
    Example: spark-deploy down recipes/dspark-0731-b12x.yaml
    Example: spark-deploy down --all --json
    """
    with exit_codes(as_json):
        if recipe is not None and all_recipes:
            raise BadInput("give RECIPE or --all, not both")
        name = _recipe_name(recipe, inventory)
        inv, _ = load_inventory(inventory)
        events = Events(TerminalSink(err if as_json else out))
        asked: list[bool] = []

        def approve(recipes: list[str]) -> bool:
            if all_recipes or yes:
                return True
            if not can_ask(as_json):
                return False
            asked.append(typer.confirm(f"stop {len(recipes)} recipes ({', '.join(recipes)}) on {inv.cluster}?",
                                       default=False, err=True))
            return asked[-1]

        try:
            result = down_mod.down(inv, name, events, approve=approve)
        except LockError as exc:
            raise Failed(str(exc)) from exc
        except down_mod.DownRefused as exc:
            if asked:
                raise Failed(f"not confirmed: {exc}") from exc
            raise BadInput(f"{exc}: name one (`spark-deploy down RECIPE`), or --all stops every one "
                           "(--yes: do not ask)") from exc
        finally:
            events.close()
        if as_json:
            emit_json({"ok": result.ok, "recipe": name,
                       "removed": [{"node": n, "container": c.name, "id": c.id} for n, c in result.removed],
                       "rollback_recreates": {str(k): v for k, v in result.recreate.items()},
                       "failed": result.failed, "unreachable": result.unreachable})
        elif not result.removed and result.ok:
            out.print("nothing to remove: no container of spark-deploy" + (f" for {name}" if name else ""))
        elif result.recreate:
            out.print(escape(down_mod.recreate_note(result.recreate)))
        if not result.ok:
            raise Failed("not everything was removed:\n" + "\n".join(
                f"  {node}: {why}" for node, why in result.failed.items()))


def status(
    recipe: OptionalRecipe = None,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    as_json: JsonOpt = False,
    no_probe: Annotated[bool, typer.Option("--no-probe", help="Skip the one short completion.")] = False,
    probe_timeout: Annotated[float, typer.Option("--probe-timeout", min=0.1,
                                                 help="Seconds the short completion may take.")] = PROBE_TIMEOUT,
) -> None:
    """Per node: this tool's containers (state, start, image, recipe, plan, rank), every rank present and on one
    plan, and the endpoint: /health and one short real completion. Exit 1 when anything is not serving.

    Example: spark-deploy status --json
    """
    with exit_codes(as_json):
        name = _recipe_name(recipe, inventory)
        inv, _ = load_inventory(inventory)
        report = status_mod.collect(inv, name, probe=not no_probe, probe_timeout=probe_timeout)
        if not as_json and len(report.unreachable) == len(inv.nodes):
            raise Failed(f"no node of {inv.cluster} answers, so nothing can be said about what runs: " + "; ".join(
                f"{node}: {why}" for node, why in report.unreachable.items()))
        if as_json:
            emit_json(report.as_dict())
        else:
            table = Table(title="spark-deploy containers")
            for column in ("node", "container", "state", "started", "image", "recipe", "plan", "rank"):
                table.add_column(column, overflow="fold")
            for r in report.rows:
                table.add_row(r.node, r.container, r.state, r.started_at[:19].replace("T", " "),
                              r.image_id.removeprefix("sha256:")[:12], r.recipe, r.plan_hash, str(r.rank))
            out.print(table)
            for d in report.deployments:
                verdict = "[green]every rank running one plan[/]" if d.ok else "[red]" + escape("; ".join(d.problems)) + "[/]"
                if d.ok:
                    verdict += f" (plan {d.plan_hashes[0]}, " + (
                        f"release {d.release})" if d.release is not None else
                        "release unknown: a node was not read)" if not d.release_known else "no release record)")
                out.print(f"{escape(d.recipe)}: {verdict}")
                if d.kv_cache:
                    out.print(f"  KV cache tokens: {escape(kv_report.text(d.kv_cache))}")
                if d.engine:
                    from ..facts.fingerprint import short as engine_short

                    out.print(f"  engine: {escape(engine_short(d.engine))}")
            for e in report.endpoints:
                health = "[green]healthy[/]" if e.healthy else f"[red]not healthy[/] ({escape(e.error)})"
                gen = {None: "not probed", True: "[green]generates[/]", False: f"[red]does not generate[/] ({escape(e.probe)})"}[e.generates]
                out.print(f"endpoint {escape(e.url)}: {health}, {gen}, models: {escape(', '.join(e.models) or '-')}")
            if report.supervisor is not None and report.supervisor.watch != "none":
                out.print(escape(report.supervisor.line()))
            if report.crash_loop:
                err.print(f"[bold red]crash loop[/]: {escape(report.crash_loop)}")
            for why in report.unreachable.values():
                err.print(f"[red]unreachable[/] {escape(why)}")
        if not report.ok:
            raise FailedAsShown("; ".join(
                [p for d in report.deployments for p in d.problems]
                + [f"{n}: unreachable: {why}" for n, why in report.unreachable.items()]
                + [f"endpoint {e.url}: " + ("not healthy" if not e.healthy else "does not generate")
                   for e in report.endpoints if not e.healthy or e.generates is False]) or "not ok",
                node=only_node(report.unreachable) if report.unreachable else None)


def logs(
    recipe: OptionalRecipe = None,
    inventory: InventoryOpt = None, cluster: ClusterOpt = None,
    node: NodeOpt = None,
    follow_: Annotated[bool, typer.Option("--follow", "-f", help="Keep streaming (not with --json).")] = False,
    since: Annotated[Optional[str], typer.Option("--since", help="e.g. 10m, 2h, or a timestamp.")] = None,
    tail: Annotated[Optional[int], typer.Option("--tail", min=1, help="The last N lines of each node (by the time "
                                                "docker stamped on each line), merged by time: N per node, not in "
                                                "all. With -f: each container's last N, then what follows.",
                                                show_default=False)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Logs of this tool's containers, each line prefixed by its node, merged in time order (the time docker
    stamped on each line).

    \b
    Example: spark-deploy logs --node spark-2 --since 10m
    Example: spark-deploy logs --tail 50 --json
    """
    with exit_codes(as_json):
        if follow_ and as_json:
            raise BadInput("--follow streams without end; --json prints one object: use one of them")
        name = _recipe_name(recipe, inventory)
        cluster, inv = _cluster(inventory)
        try:
            nodes = cluster.nodes
            if node is not None:
                if node not in {n.name for n in inv.nodes}:
                    raise BadInput(f"--node {node!r} is not in {inventory}")
                nodes = [cluster[node]]
            width = max(len(c.name) for c in nodes)
            if follow_:
                lock = threading.Lock()

                def emit(node_name: str, line: str) -> None:
                    with lock:
                        out.print(f"[cyan]{escape(node_name.ljust(width))}[/] | {escape(line)}")

                stop = threading.Event()
                try:
                    logs_mod.follow(cluster, nodes, name, since, tail, emit, stop)
                except KeyboardInterrupt:
                    stop.set()
            elif as_json:
                emit_json({"ok": True, "lines": [{"at": at, "node": node_name, "line": line} for at, node_name, line
                                                 in logs_mod.merged(cluster, nodes, name, since, tail)]})
            else:
                for _, node_name, line in logs_mod.merged(cluster, nodes, name, since, tail):
                    out.print(f"[cyan]{escape(node_name.ljust(width))}[/] | {escape(line)}")
        except GroupError as exc:
            raise Failed(str(exc)) from exc
        finally:
            cluster.close()
