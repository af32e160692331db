"""The steps after the log checks: the facts once ready (recorded, never fatal) and the acceptance checks (a
failed one fails the release, so the Runner undoes it and the previous release is restored)."""
from __future__ import annotations

from ..acceptance import Result, blocking, run_checks
from ..acceptance.context import context_for
from ..acceptance.run import plan
from ..runner.events import Phase
from ..runner.runner import StepFailed
from .after_ready import facts, summary
from .context import UpContext
from .steps_prepare import NoUndo


class AfterReady(NoUndo):
    phase, detail = Phase.AFTER_READY, "MemAvailable and swap per node, the engine's KV-cache lines"

    def run(self, ctx: UpContext) -> None:
        meminfo: dict[str, str | None] = {}
        for node in ctx.cluster.nodes:
            try:
                got = node.run(["cat", "/proc/meminfo"], timeout=10)
                meminfo[node.name] = got.stdout if got.ok else None
            except Exception:  # noqa: BLE001 - a fact not read is recorded as such, the release stands
                meminfo[node.name] = None
        logs = {w.conn.name: list(w.lines) for w in ctx.monitor.watches.values()}
        reserve = ctx.dep.recipe.preflight.memory_reserve_gib
        ctx.after_ready = facts(meminfo, logs, reserve)
        ctx.events.note(f"after ready: {summary(ctx.after_ready)}")
        for node in ctx.after_ready["under_reserve"]:
            free = ctx.after_ready["nodes"][node]["mem_available_gib"]
            ctx.events.warn(f"{free:.1f} GiB available after ready, under the recipe's reserve of {reserve:g} GiB "
                            "(preflight.memory_reserve_gib; field note 8): lower gpu_memory_utilization", node)


class Accept(NoUndo):
    phase = Phase.ACCEPTANCE

    def __init__(self, names: list[str]):
        self.detail = ", ".join(names) or "the recipe's own checks"

    def run(self, ctx: UpContext) -> None:
        history = ctx.history.releases if ctx.history else []
        actx = context_for(ctx.dep.recipe, history, ctx.release.id if ctx.release else None)
        head = ctx.plan.head.node.name

        def said(result: Result) -> None:
            status = str(result.status) + (" (advisory)" if result.advisory and result.status.value == "fail" else "")
            ctx.events.check(result.name, status, {head: result.seen}, result.seen)

        ctx.acceptance = run_checks(ctx.endpoint, actx, on_result=said)
        failed = blocking(ctx.acceptance)
        if failed:
            raise StepFailed(self.phase, "; ".join(f"acceptance check {r.name} failed at {head}'s API "
                                                   f"({ctx.endpoint.url}): {r.seen}" for r in failed), [head])


def accept_steps(ctx: UpContext) -> list:
    steps: list = [AfterReady()]
    if ctx.opts.accept:
        steps.append(Accept([name for name, _check in plan(context_for(ctx.dep.recipe, []))]))
    return steps
