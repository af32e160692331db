"""`spark-deploy tune RECIPE --set KEY=V1,V2,...`: every variant deployed and benched in one operation, in a
balanced order, against a no-speculation baseline of the same sitting; the winner left serving.

Built on `bench --compare`'s blocks (compare.py): a block makes one variant serve (`up` the first time, a
rollback to its release after) and runs the same shots on it. Before anything loads, every speculative
variant goes through preflight's speculative-tokens check (num_speculative_tokens against the draft's
n_predict, read from the nodes): an illegal value refuses the whole tune, nothing deployed. At the end the
winner (tune_rule.py) serves — or the original when nothing beats it beyond the spread — and the table is
written into that release's record; one `tune` audit line, every `up` and rollback a part of it.

Fair to the first variant: the run's first block takes as many warm-up shots per profile as it keeps, so
kernels a cold JIT cache (the per-node cache the recipe mounts) compiles on first use are compiled before
anything is counted, on the first variant as on the ones after it, which find the cache warm. After every
block an ordered numeric key is checked for a direction that cannot win (tune_rule.cannot_win): its larger
values are never started and the table says why.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Callable

from ..checks.verdict import Status
from ..config.load import Deployment, bind_recipe_text
from ..config.source import ConfigError
from ..operation import AuditAction, Operation, Outcome, Reach
from ..preflight import run_checks, select
from ..releases import store
from ..render.plan import build_plan
from ..runner.events import Events
from ..transport.group import Cluster
from .client import open_client
from .compare import Block, CompareError, Seams, bring_back, deploy_side
from .runner import Group, Plan, run
from .stats import acceptance
from .target import Target, TargetError, of_recipe
from .tune_plan import Variant
from .tune_rule import Cell, ProfileTable, Winner, axis, cannot_win, profile_table, winner

SPEC_CHECK = "speculative-tokens"


class TuneRefused(Exception):
    """A variant is illegal (the speculative-tokens lint) or cannot be bound: nothing loaded (exit 2)."""


class TuneError(Exception):
    """A deploy, a measurement or the final settle failed (exit 1); the message says which and what serves."""


@dataclass
class TuneResult:
    recipe: str
    variants: list[Variant]
    order: list[int]
    blocks: list[tuple[int, Block]] = field(default_factory=list)  # (variant, block)
    releases: dict[int, int] = field(default_factory=dict)  # variant -> its release
    tables: list[ProfileTable] = field(default_factory=list)
    skipped: dict[int, str] = field(default_factory=dict)  # variant -> why it cannot win (never started)
    winner: Winner | None = None
    serving: str = ""

    @property
    def labels(self) -> list[str]:
        return [v.label for v in self.variants]

    @property
    def baseline(self) -> int | None:
        return next((i for i, v in enumerate(self.variants) if v.baseline), None)

    @property
    def original(self) -> int:
        return next(i for i, v in enumerate(self.variants) if v.original)

    def record(self) -> dict:
        """The table as the winner's release keeps it (Release.tune)."""
        w = self.winner
        return {"recipe": self.recipe, "variants": [{**v.as_dict(), "release": self.releases.get(i)}
                                                    for i, v in enumerate(self.variants)],
                "order": [self.labels[i] for i in self.order], "baseline": self.baseline, "original": self.original,
                "winner": w.variant if w else None, "best": w.best if w else None,
                "scores": {self.labels[v]: s for v, s in (w.score if w else {}).items()},
                "spread": w.spread if w else None, "reason": w.reason if w else "",
                "skipped": {self.labels[v]: why for v, why in self.skipped.items()},
                "profiles": {t.profile: t.as_dict(self.labels) for t in self.tables}}

    def as_dict(self) -> dict:
        return {**self.record(), "serving": self.serving,
                "winner_release": self.releases.get(self.winner.variant) if self.winner else None}


def bind_variants(variants: list[Variant], dep: Deployment) -> list[Deployment]:
    """Each variant's text as a Deployment on the same inventory; a value the recipe refuses is bad input."""
    out, problems = [], []
    for v in variants:
        try:
            out.append(bind_recipe_text(v.text, f"{dep.recipe_path} with {v.label}", dep.inventory,
                                        dep.inventory_path, dep.inventory_doc))
        except ConfigError as exc:
            problems.append(f"{v.label}: {exc}")
    if problems:
        raise TuneRefused("; ".join(problems))
    return out


def _lint(op: Operation, deps: list[Deployment], variants: list[Variant]) -> list[str]:
    """The speculative-tokens check for every speculative variant, on facts read from the nodes now: every
    variant's read at once (one round trip's time, not one per variant)."""
    specs = select(only=[SPEC_CHECK])
    todo = [(dep, v) for dep, v in zip(deps, variants) if dep.recipe.vllm.speculative_config is not None]
    with ThreadPoolExecutor(max(1, min(len(todo), 4)), thread_name_prefix="tune-lint") as pool:
        reports = list(pool.map(lambda dv: run_checks(dv[0], build_plan(dv[0]), op.cluster, specs, opened=True),
                                todo))
    bad = []
    for (_dep, v), report in zip(todo, reports):
        for verdict in report.failed():
            cells = "; ".join(f"{n}: {c.value}" for n, c in verdict.cells.items() if c.status is Status.FAIL)
            bad.append(f"{v.label}: {verdict.name}: {cells}" + (f" ({verdict.fix})" if verdict.fix else ""))
    return bad


def _side(op: Operation, i: int, dep: Deployment, result: TuneResult, inventory_path: str, events: Events,
          seams: Seams) -> Target:
    """Make variant i serve: `up` the first time, a rollback to its release after."""
    if i not in result.releases:
        tgt = deploy_side(op, result.labels[i], dep, events, seams)
        result.releases[i] = tgt.release
        return tgt
    bring_back(op, op.reread().history.get(result.releases[i]), inventory_path, events, seams)
    try:
        return of_recipe(dep, want_headers=False, connector=seams.connector)
    except TargetError as exc:
        raise CompareError(f"{result.labels[i]}: {exc}") from None


def _profile_tables(result: TuneResult) -> list[ProfileTable]:
    """Every profile's table from the blocks run so far."""
    tables = []
    first = min((g.concurrency for _, b in result.blocks for g in b.groups), default=1)
    profiles = list(dict.fromkeys(g.profile for _, b in result.blocks for g in b.groups))
    for profile in profiles:
        cells = []
        for i in range(len(result.variants)):
            groups = [g for v, b in result.blocks if v == i for g in b.groups
                      if g.profile == profile and g.concurrency == first]
            heads = [h.summary.median for g in groups for h in [g.headline()] if h is not None]
            shots = [x for g in groups for x in g.decode_values()]
            acc = acceptance([s.delta for g in groups for s in g.kept if s.delta is not None],
                             groups[0].draft_budget if groups else None)
            cells.append(Cell(i, heads, shots, acc, skipped=result.skipped.get(i, "")))
        tables.append(profile_table(profile, cells, result.baseline))
    return tables


def _tables(result: TuneResult) -> None:
    result.tables = _profile_tables(result)
    result.winner = winner(result.tables, result.original, result.labels)


def _stop_early(result: TuneResult) -> list[int]:
    """Skip the larger values of a direction that cannot win (never the original or the baseline); the
    variants newly skipped."""
    baseline = result.baseline
    line = axis([v.changes for v in result.variants], set() if baseline is None else {baseline})
    if line is None:
        return []
    started = {i for i, _ in result.blocks}
    new = {v: why for v, why in cannot_win(_profile_tables(result), line, result.labels, started,
                                           {result.original}).items() if v not in result.skipped}
    result.skipped.update(new)
    return list(new)


def tune(dep: Deployment, variants: list[Variant], order: list[int], plan_of: Callable[[Target], Plan],
         events: Events, on_shot: Callable[[Group, object], None] = lambda g, s: None,
         seams: Seams = Seams()) -> TuneResult:
    """ONE operation: lint every variant (refused: nothing loaded), run the blocks in `order`, judge, leave
    the winner serving (the original when nothing beats it beyond the spread; after a failure, what served
    before), write the table into the winner's release record; one `tune` audit line."""
    deps = bind_variants(variants, dep)
    opts = seams.options
    result = TuneResult(str(dep.recipe_path), variants, order)
    with Operation(dep.inventory, events, AuditAction.TUNE, reach=Reach.ALL,
                   ttl=max(opts.ready_timeout, opts.listen_timeout) + 600,
                   cluster_factory=partial(Cluster, connector=seams.connector)) as op:
        bad = _lint(op, deps, variants)
        if bad:
            why = "refused before any load: " + "; ".join(bad)
            op.done(Outcome.REFUSED, why[:600])
            raise TuneRefused(why)
        before = op.state.serving if op.state.serving_known else None
        failure: Exception | None = None
        try:
            for i in order:
                if i in result.skipped:
                    continue
                tgt = _side(op, i, deps[i], result, dep.inventory_path, events, seams)
                plan = replace(plan_of(tgt), warm_probe=False)  # the table shows no TTFT: no request for it
                if not result.blocks:  # the run's first block: the JIT cache warmed before anything counts
                    plan = replace(plan, warmup=plan.warmup + plan.shots)
                with open_client(tgt.url) as http:
                    result.blocks.append((i, Block(result.labels[i], tgt.release, run(http, tgt.model, plan, on_shot))))
                for v in _stop_early(result):
                    events.note(f"tune: {result.labels[v]} skipped: cannot win ({result.skipped[v]})")
        except Exception as exc:  # noqa: BLE001 - what served before comes back first, then this is reported
            failure = exc
        except BaseException:
            op.done(Outcome.INTERRUPTED, f"tune of {dep.recipe_path} interrupted after {len(result.blocks)} blocks",
                    blocks=[b.label for _, b in result.blocks])
            raise
        if failure is None:
            _tables(result)
        result.serving = _settle(op, result, before, dep.inventory_path, events, seams)
        if failure is None:
            _write(op, result)
        w = result.winner
        detail = (f"{dep.recipe_path}: {len(variants)} variants, {len(result.blocks)} blocks; "
                  + (w.reason if w and failure is None else f"failed: {(str(failure) or repr(failure)).splitlines()[0]}")
                  + f"; {result.serving}")
        op.done(Outcome.OK if failure is None and not result.serving.startswith("RESTORE") else Outcome.FAILED,
                detail[:600], release=result.releases.get(w.variant) if w else None,
                blocks=[{"variant": b.label, "release": b.release} for _, b in result.blocks])
    if failure is not None:
        raise TuneError(f"{(str(failure) or repr(failure)).splitlines()[0]}; {result.serving}") from failure
    if result.serving.startswith("RESTORE"):
        raise TuneError(result.serving)
    return result


def _settle(op: Operation, result: TuneResult, before, inventory_path: str, events: Events, seams: Seams) -> str:
    """The winner's release serves; after a failure, the release that served before."""
    want = before
    if result.winner is not None and result.winner.variant in result.releases:
        want = op.reread().history.get(result.releases[result.winner.variant])
    try:
        return bring_back(op, want, inventory_path, events, seams)
    except CompareError as exc:
        return f"RESTORE FAILED: {exc}"


def _write(op: Operation, result: TuneResult) -> None:
    """The table into the winner's release record (what `history --json` shows as `tune`)."""
    rid = result.releases.get(result.winner.variant) if result.winner else None
    state = op.reread()
    first = state.history.get(rid) if rid is not None else None
    if first is None:
        return
    now = state.serving if state.serving_known else None
    for release in {first.id: first, **({now.id: now} if now and now.plan_hash == first.plan_hash else {})}.values():
        store.write_release(op.cluster, state.inventory, release.touch(tune=result.record()))
