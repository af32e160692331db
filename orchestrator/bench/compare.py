"""`bench --compare A.yaml B.yaml --blocks ABAB` (note 21): deploy each recipe in turn as a release, run
the same shots in interleaved blocks, quote B/A per profile with the drift between blocks of the same
recipe, and bring back the release that served before.

Noise on a shared machine (or a warming GPU) moves absolute numbers between minutes; interleaving puts
A and B under the same drift, so their ratio is steadier than either number (note 16).
"""

from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from ..config.load import Deployment
from ..deploy import down as down_mod
from ..deploy import rollback as rollback_mod
from ..deploy.up import DeployFailed, UpOptions
from ..deploy.up import up as run_up
from ..http_api.endpoint import Endpoint
from ..operation import AuditAction, Operation, Outcome, Reach
from ..transport.group import Cluster, Connector
from ..releases.lock import LockError
from ..runner.events import Events
from ..transport.cancel import signals_interrupt
from .client import open_client
from .runner import Group, Plan, run
from .target import Target, TargetError, of_recipe


class CompareError(Exception):
    """A deploy, a measurement or the restore failed (exit 1); the message says which."""


def parse_blocks(text: str) -> str:
    blocks = text.strip().upper()
    if not blocks or set(blocks) - {"A", "B"} or "A" not in blocks or "B" not in blocks:
        raise ValueError(f"--blocks {text!r}: a sequence of A and B with both, e.g. ABAB or ABBA")
    return blocks


@dataclass
class Block:
    label: str  # "A" or "B"
    release: int | None
    groups: list[Group]


@dataclass
class CompareResult:
    recipes: dict[str, str]  # label -> recipe name
    blocks: list[Block] = field(default_factory=list)
    before: int | None = None  # the id of the release that served before
    restored: str = ""  # what happened to it at the end

    def _medians(self, label: str, profile: str, c: int) -> list[float]:
        out = []
        for b in self.blocks:
            if b.label != label:
                continue
            for g in b.groups:
                head = g.headline()
                if g.profile == profile and g.concurrency == c and head is not None:
                    out.append(head.summary.median)
        return out

    def rows(self) -> list[dict]:
        """Per profile and level: the median of each label's block medians, B/A, and each label's drift
        ((max - min) / mean of its block medians)."""
        keys = []
        for b in self.blocks:
            for g in b.groups:
                if (g.profile, g.concurrency) not in keys:
                    keys.append((g.profile, g.concurrency))
        rows = []
        for profile, c in keys:
            a, b = self._medians("A", profile, c), self._medians("B", profile, c)
            row = {"profile": profile, "concurrency": c, "a_blocks": a, "b_blocks": b,
                   "a": statistics.median(a) if a else None, "b": statistics.median(b) if b else None}
            row["ratio"] = row["b"] / row["a"] if a and b else None
            row["a_drift"] = (max(a) - min(a)) / statistics.mean(a) if len(a) > 1 else None
            row["b_drift"] = (max(b) - min(b)) / statistics.mean(b) if len(b) > 1 else None
            rows.append(row)
        return rows

    def as_dict(self) -> dict:
        return {"recipes": self.recipes, "before": self.before, "restored": self.restored,
                "blocks": [{"label": b.label, "release": b.release, "groups": [g.as_dict() for g in b.groups]}
                           for b in self.blocks],
                "ratios": self.rows()}


def read_serving(op: Operation, what: str):
    """The release serving now, read again on the operation's connections (the blocks change it)."""
    state = op.reread()
    if not state.serving_known:
        raise CompareError(f"{what}: cannot tell what serves: " + "; ".join(state.problems()))
    return state.serving


def make_room(op: Operation, recipe: str, events: Events, seams: "Seams"):
    """`up` replaces only its own recipe's containers: another recipe serving on the same ports is taken
    down first (its release is recorded as stopped; the restore at the end rolls back to it)."""
    now = read_serving(op, f"making room for {recipe}")
    if now is not None and now.recipe != recipe:
        try:
            gone = down_mod.down(op.inventory, now.recipe, events, connector=seams.connector)
        except LockError as exc:
            raise CompareError(f"down {now.recipe}: {exc}") from None
        if not gone.ok:
            raise CompareError(f"down {now.recipe}: " + "; ".join(f"{n}: {w}" for n, w in gone.failed.items()))
    return now


def deploy_side(op: Operation, label: str, dep: Deployment, events: Events, seams: "Seams") -> Target:
    """Deploy one side; a failure names the side (A or B) as well as its recipe: both may share a name."""
    side = f"{label} ({dep.recipe.name}, {dep.recipe_path})"
    try:
        make_room(op, dep.recipe.name, events, seams)
        with signals_interrupt():
            run_up(dep, events, seams.options, endpoint_at=seams.endpoint_at, op=op)
    except (DeployFailed, CompareError) as exc:
        raise CompareError(f"{side}: up failed: {exc}") from None
    try:
        return of_recipe(dep, want_headers=False, connector=seams.connector)
    except TargetError as exc:
        raise CompareError(f"{side}: {exc}") from None


def bring_back(op: Operation, before, inventory_path: str, events: Events, seams: "Seams") -> str:
    """Bring back the release that served before (`before`: a Release) by a rollback to it, unless its
    plan is the one serving now."""
    if before is None:
        return "nothing served before: the last block's release is left serving"
    now = read_serving(op, f"restoring release {before.id}")
    if now is not None and now.plan_hash == before.plan_hash:
        return f"release {before.id}'s plan serves again (release {now.id})"
    make_room(op, before.recipe, events, seams)
    try:  # the one rollback path: an inventory changed since that release is refused here too, never deployed
        with signals_interrupt():
            rollback_mod.roll_back(op, before.id, events, inventory_path=inventory_path, options=seams.options,
                                   endpoint_at=seams.endpoint_at)
    except (rollback_mod.RollbackRefused, DeployFailed) as exc:
        raise CompareError(f"restoring release {before.id}: {exc}") from None
    return f"release {before.id} serves again (rolled back to it)"


@dataclass(frozen=True)
class Seams:
    """How the releases are deployed: the nodes' connections, the head's API, the up's options (defaults:
    SSH, HTTP, `up`'s own; the unit tests pass in-memory ones)."""

    connector: Connector | None = None
    endpoint_at: Callable[[str, int], Endpoint] = Endpoint
    options: UpOptions = field(default_factory=UpOptions)


def compare(deps: dict[str, Deployment], inventory_path: str, blocks: str, plan_of: Callable[[Target], Plan],
            events: Events,
            on_shot: Callable[[Group, object], None] = lambda g, s: None,
            on_block: Callable[[Target, Plan, list[Group]], None] = lambda t, p, g: None,
            seams: Seams = Seams()) -> CompareResult:
    """ONE operation: the cluster opened once, the lock taken once, the release that serves read under it;
    the blocks run in order (each `up` a body of the operation); that release restored at the end whatever
    happened (errors after the restore); one audit line `bench-compare` naming every block's release and
    outcome."""
    inventory = deps["A"].inventory
    opts = seams.options
    with Operation(inventory, events, AuditAction.BENCH_COMPARE, reach=Reach.ALL,
                   ttl=max(opts.ready_timeout, opts.listen_timeout) + 600,
                   cluster_factory=partial(Cluster, connector=seams.connector)) as op:
        if not op.state.serving_known:
            raise CompareError("cannot tell what serves: " + "; ".join(op.state.problems()))
        before = op.state.serving
        result = CompareResult({k: d.recipe.name for k, d in deps.items()},
                               before=None if before is None else before.id)
        said: list[str] = []  # per block, its release and outcome: the audit line's detail
        failure: Exception | None = None
        try:
            for label in blocks:
                tgt = deploy_side(op, label, deps[label], events, seams)
                plan = plan_of(tgt)
                with open_client(tgt.url) as http:
                    groups = run(http, tgt.model, plan, on_shot)
                result.blocks.append(Block(label, tgt.release, groups))
                said.append(f"{label} {deps[label].recipe.name} release {tgt.release}: measured")
                on_block(tgt, plan, groups)  # e.g. record the block's figures with its release
        except Exception as exc:  # noqa: BLE001 - restore first, then report this
            failure = exc
            words = (str(exc) or repr(exc)).splitlines()[0]
            said.append(f"{_next(blocks, result)}: failed: {words}"[:300])
        except BaseException as exc:  # an interrupt: no restore, but the line names what was measured
            said.append(f"{_next(blocks, result)}: {type(exc).__name__}")
            op.done(Outcome.INTERRUPTED, "; ".join(said), blocks=_blocks(result, blocks, deps))
            raise
        try:
            result.restored = bring_back(op, before, inventory_path, events, seams)
        except CompareError as exc:
            result.restored = f"RESTORE FAILED: {exc}"
            if failure is None:
                failure = exc
        op.done(Outcome.OK if failure is None else Outcome.FAILED, "; ".join([*said, result.restored]),
                release=None if before is None else before.id, blocks=_blocks(result, blocks, deps))
    if failure is not None:
        if isinstance(failure, CompareError):
            raise CompareError(f"{failure}; {result.restored}") from None
        raise failure
    return result


def _next(order: str, result: CompareResult) -> str:
    """The block that was running when the comparison stopped (its figures were not all taken)."""
    done = len(result.blocks)
    return order[done] if done < len(order) else f"after block {order[-1]}"


def _blocks(result: CompareResult, order: str, deps: dict[str, Deployment]) -> list[dict]:
    """Every block in order: its recipe, the release it measured, and whether it was measured."""
    done = [{"block": b.label, "recipe": deps[b.label].recipe.name, "release": b.release, "outcome": "measured"}
            for b in result.blocks]
    return done + [{"block": label, "recipe": deps[label].recipe.name, "outcome": "failed" if i == 0 else "not run"}
                   for i, label in enumerate(order[len(result.blocks):])]
