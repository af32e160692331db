"""`up RECIPE --gate`: deploy a candidate only if it measures no slower than what serves (issue 38).

One operation, built on `bench --compare`'s blocks: A is the release serving now, B the recipe. Blocks run
in the given order (ABAB by default): an A block measures A (started again by the rollback path when B
served before it), the first B block deploys B with `up` (acceptance included), a later one rolls back to
that release. The same shots run in every block, so B/A is taken under the same drift (note 21). B stays
only when every `up` of it passed acceptance and every gated profile is within the bound (gate_rule.py);
otherwise A is started again. The verdict and the figures are written into the record of each release B
was measured as, and the operation's one audit line (`up-gate`) says the verdict.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import partial
from typing import Callable

from ..config.load import Deployment
from ..deploy.restore import recorded_deployment
from ..operation import AuditAction, Operation, Outcome, Reach
from ..releases import store
from ..releases.record import Release
from ..render.plan import build_plan
from ..runner.events import Events
from ..transport.group import Cluster
from .client import open_client
from .compare import Block, CompareError, CompareResult, Seams, bring_back, deploy_side, read_serving
from .gate_rule import GateVerdict, Judgment, judge, overall
from .runner import Group, Plan, run
from .target import Target, TargetError, of_recipe


class GateRefused(Exception):
    """Nothing to gate against (nothing serves, serving unknown) or B is A: bad input, nothing changed."""


class CandidateFailed(CompareError):
    """An `up` or rollback of B failed (acceptance included): B is rejected; `up`'s restore started A."""


class GateError(Exception):
    """A measurement or the final restore failed (exit 1); the message says which and what serves."""


@dataclass
class GateResult:
    against: int  # A: the release that served
    candidate: str  # B's recipe file
    tolerance: float
    blocks: CompareResult
    releases: list[int] = field(default_factory=list)  # the releases B was measured as (first: B's release)
    judgments: list[Judgment] = field(default_factory=list)
    verdict: GateVerdict = GateVerdict.REJECTED
    reason: str = ""  # why rejected: the profiles below their bound, or the `up` that failed
    serving: str = ""  # what serves at the end

    @property
    def release(self) -> int | None:
        return self.releases[0] if self.releases else None

    def record(self) -> dict:
        """What B's release keeps (Release.gate); `history` shows the verdict from it."""
        return {"verdict": str(self.verdict), "reason": self.reason, "against": self.against,
                "blocks": "".join(b.label for b in self.blocks.blocks) or None, "tolerance": self.tolerance,
                "releases": self.releases, "profiles": {j.profile: j.as_dict() for j in self.judgments}}

    def as_dict(self) -> dict:
        return {**self.record(), "release": self.release, "candidate": self.candidate, "serving": self.serving,
                "compare": self.blocks.as_dict()}


def gate_text(gate: dict | None) -> str:
    """One cell for `history`: `kept: code x1.00, zh x0.99` or `rejected: zh x0.80 [0.79-0.81] < 0.97`."""
    if not gate:
        return "-"
    parts = []
    for name, p in (gate.get("profiles") or {}).items():
        if p.get("ratio") is None:
            parts.append(f"{name} unmeasured")
            continue
        span = f" [{p['interval'][0]:.2f}-{p['interval'][1]:.2f}]" if p.get("interval") else ""
        low = f" < {p['bound']:.2f}" if p.get("verdict") == "below" else ""
        parts.append(f"{name} x{p['ratio']:.2f}{span}{low}")
    text = f"{gate.get('verdict')} vs r{gate.get('against')}"
    return text + (": " + ", ".join(parts) if parts else f": {gate.get('reason') or ''}")


def _judge(result: GateResult, tolerance: float) -> None:
    """Per profile at the first concurrency level: the rule of gate_rule.py on every block's shots."""
    rows = result.blocks.rows()
    first = min((r["concurrency"] for r in rows), default=1)
    for row in (r for r in rows if r["concurrency"] == first):
        shots = {label: [v for blk in result.blocks.blocks if blk.label == label for g in blk.groups
                         if g.profile == row["profile"] and g.concurrency == row["concurrency"]
                         for v in g.decode_values()] for label in "AB"}
        result.judgments.append(judge(row["profile"], row["a_blocks"], row["b_blocks"], shots["A"], shots["B"],
                                      tolerance))
    result.verdict, failing = overall(result.judgments)
    result.reason = "; ".join(j.text() for j in failing) or ("" if result.judgments else "nothing was measured")


def _measure(tgt: Target, plan_of: Callable[[Target], Plan], on_shot) -> list[Group]:
    plan = plan_of(tgt)
    with open_client(tgt.url) as http:
        return run(http, tgt.model, plan, on_shot)


def _side(op: Operation, label: str, a: tuple[Release, Deployment], dep_b: Deployment, result: GateResult,
          inventory_path: str, events: Events, seams: Seams) -> Target:
    """Make `label`'s release serve: A by the rollback path (nothing when its plan serves), B by `up` the
    first time and a rollback to that release after; the target to measure."""
    if label == "A":
        bring_back(op, a[0], inventory_path, events, seams)
        dep = a[1]
    elif not result.releases:
        try:
            tgt = deploy_side(op, "B", dep_b, events, seams)
        except CompareError as exc:
            raise CandidateFailed(str(exc)) from None
        result.releases.append(tgt.release)
        return tgt
    else:
        first = op.reread().history.get(result.releases[0])
        try:
            bring_back(op, first, inventory_path, events, seams)
        except CompareError as exc:
            raise CandidateFailed(f"B ({dep_b.recipe.name}, {dep_b.recipe_path}): {exc}") from None
        dep = dep_b
    try:
        tgt = of_recipe(dep, want_headers=False, connector=seams.connector)
    except TargetError as exc:
        raise CompareError(f"{label}: {exc}") from None
    if label == "B" and tgt.release not in result.releases:
        result.releases.append(tgt.release)
    return tgt


def _failed_b(op: Operation, newest_before: int, recipe: str) -> list[int]:
    """The release a failed first `up` of B left (its record says failed): the newest after the gate began."""
    made = [r.id for r in op.reread().releases if r.id > newest_before and r.recipe == recipe and r.rollback_of is None]
    return sorted(made)[:1]


def gate(dep_b: Deployment, inventory_path: str, blocks: str, plan_of: Callable[[Target], Plan], tolerance: float,
         events: Events, on_shot: Callable[[Group, object], None] = lambda g, s: None,
         seams: Seams = Seams()) -> GateResult:
    """ONE operation (open, lock, one state read): refuse unless a known release serves; run the blocks;
    judge; leave B serving when kept, start A again otherwise (also after a failed `up` of B or a failed
    measurement); write the verdict into B's release records; one `up-gate` audit line."""
    opts = seams.options
    with Operation(dep_b.inventory, events, AuditAction.UP_GATE, reach=Reach.ALL,
                   ttl=max(opts.ready_timeout, opts.listen_timeout) + 600,
                   cluster_factory=partial(Cluster, connector=seams.connector)) as op:
        a = op.state.serving if op.state.serving_known else None
        why = None
        if a is None:
            why = ("nothing to gate against; run `up` without --gate"
                   + ("" if op.state.serving_known else ": cannot tell what serves: " + "; ".join(op.state.problems())))
        elif a.plan_hash == build_plan(dep_b).plan_hash:
            why = f"{dep_b.recipe_path} is the plan release {a.id} serves: nothing to gate (B would be A)"
        if why is not None:
            op.done(Outcome.REFUSED, why)
            raise GateRefused(why)
        newest = max((r.id for r in op.state.releases), default=0)
        result = GateResult(a.id, str(dep_b.recipe_path), tolerance,
                            CompareResult({"A": a.recipe, "B": dep_b.recipe.name}, before=a.id))
        a_side = (a, recorded_deployment(a, op.state.inventory, inventory_path))
        failure: Exception | None = None
        try:
            for label in blocks:
                tgt = _side(op, label, a_side, dep_b, result, inventory_path, events, seams)
                result.blocks.blocks.append(Block(label, tgt.release, _measure(tgt, plan_of, on_shot)))
        except CandidateFailed as exc:  # an `up` (or rollback) of B failed, acceptance included: B is rejected
            result.releases = result.releases or _failed_b(op, newest, dep_b.recipe.name)
            result.reason = f"{exc}".splitlines()[0][:400]
        except Exception as exc:  # noqa: BLE001 - a measurement failed: A again first, then report it
            failure = exc
            result.reason = f"not judged: {(str(exc) or repr(exc)).splitlines()[0]}"[:400]
        except BaseException:
            op.done(Outcome.INTERRUPTED, f"gate of {dep_b.recipe_path} against release {a.id} interrupted",
                    release=result.release, blocks=[b.label for b in result.blocks.blocks])
            raise
        if not result.reason:
            _judge(result, tolerance)
        result.serving, settled = _settle(op, result, a, inventory_path, events, seams)
        if not settled and failure is None:
            failure = GateError(result.serving)
        _write(op, result)
        op.done(Outcome.OK if result.verdict is GateVerdict.KEPT else Outcome.FAILED,
                f"{result.verdict} release {result.release} ({dep_b.recipe_path}) against release {a.id}: "
                f"{result.reason or gate_text(result.record())}; {result.serving}"[:600],
                release=result.release, gate=result.record())
    if failure is not None:
        raise GateError(f"{result.reason}; {result.serving}") from failure
    return result


def _settle(op: Operation, result: GateResult, a: Release, inventory_path: str, events: Events,
            seams: Seams) -> tuple[str, bool]:
    """B kept: B's release serves (rolled back to when the last block was A's). Otherwise A again.
    (what serves, whether that worked)"""
    want = a
    if result.verdict is GateVerdict.KEPT:
        want = op.reread().history.get(result.releases[-1])
    try:
        return bring_back(op, want, inventory_path, events, seams), True
    except CompareError as exc:
        return f"RESTORE FAILED: {exc}", False


def _write(op: Operation, result: GateResult) -> None:
    """The verdict into every release B was measured as (what `history` shows)."""
    state = op.reread()
    for rid in result.releases:
        release = state.history.get(rid)
        if release is not None:
            store.write_release(op.cluster, state.inventory, release.touch(gate=result.record()))
