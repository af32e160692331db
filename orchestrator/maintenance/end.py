"""`maintenance end`: verify, bring the baseline's release back if it no longer serves, close the window.

Bringing it back IS `rollback` to the baseline's release (deploy/rollback.prepare + `up` with
`rollback_of`): the same refusals before anything is touched (image ID, model revision), its kept
containers started again head first, every wait and check, a release of its own, the automatic restore
if it fails. No second deploy path. The window is closed (state "closed", one audit line with the reason,
both times and the outcome) only when the release serves again or there was nothing to bring back; after
a failure it stays open, so `maintenance end` can be run again once the cause is fixed.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from functools import partial
from enum import StrEnum

from ..config.load import load_inventory
from ..deploy import rollback as rollback_mod
from ..deploy.up import DeployFailed, UpOptions, UpResult
from ..http_api.endpoint import Endpoint
from ..transport.group import Cluster, Connector
from ..operation import AuditAction, Operation, Outcome, Reach
from ..runner.events import Events
from ..transport.cancel import signals_interrupt
from ..window import store
from ..window.baseline import Baseline, WindowState, said
from .diff import ADVICE
from .window import MaintenanceError, VerifyResult, verify_open


class EndOutcome(StrEnum):
    BROUGHT_BACK = "brought back"  # a rollback to the baseline's release serves
    STILL_SERVING = "still serving"  # the baseline's plan serves already (never stopped, or it came back on boot)
    NOTHING_SERVED = "nothing to bring back"  # nothing served at begin
    FAILED = "failed"  # the rollback was refused or failed: the window stays open


class EndRefused(MaintenanceError):
    """Nothing was touched: verify found changes that block (or something else serves), and no --force."""


@dataclass
class EndResult:
    verify: VerifyResult
    outcome: EndOutcome
    detail: str
    up: UpResult | None = None
    closed: Baseline | None = None

    @property
    def ok(self) -> bool:
        return self.outcome is not EndOutcome.FAILED


def refusal(v: VerifyResult) -> str | None:
    """Pure: why `end` must not go on without --force, or None."""
    reasons = []
    if v.drift.blocking:
        reasons.append("since the baseline: " + "; ".join(c.text() + f" ({c.consequence})" for c in v.drift.blocking)
                       + ". " + " ".join(ADVICE[c] for c in v.drift.consequences))
    if v.serving_now is not None and v.baseline.plan_hash is not None and not v.serves_again:
        reasons.append(f"release {v.serving_now.id} ({v.serving_now.recipe}, plan {v.serving_now.plan_hash}) serves now, "
                       f"not the baseline's release {v.baseline.release}: bringing it back would replace it")
    if v.serving_now is not None and v.baseline.plan_hash is None:
        reasons.append(f"nothing served at begin, and release {v.serving_now.id} serves now")
    return " | ".join(reasons) or None


def end(inventory_path: str, recipe: str | None, events: Events, yes: bool = False,
        ready_timeout: float = 5400.0, on_verified: Callable[[VerifyResult], None] | None = None, *,
        force: bool = False, connector: Connector | None = None,
        endpoint_at: Callable[[str, int], Endpoint] = Endpoint, options: UpOptions | None = None) -> EndResult:
    """One operation from the verify to the window closed: the lock is held throughout (the rollback inside
    reuses it), so nothing can replace the window or the release between the look and the close.
    `on_verified` sees the drift before anything is started (the CLI prints it there). `force` overrides
    the 'blocking-changes' refusal; `yes` confirms a rollback whose plan today's inventory changes.
    `connector`, `endpoint_at` and `options` (the rollback's up's) are the seams the in-memory tests use."""
    inventory, idoc = load_inventory(inventory_path)
    opts = replace(options or UpOptions(), ready_timeout=ready_timeout)
    with Operation(inventory, events, AuditAction.MAINTENANCE_END, reach=Reach.HEAD,
                   cluster_factory=partial(Cluster, connector=connector)) as op:
        v = verify_open(op, inventory_path, recipe, idoc)
        if on_verified is not None:
            on_verified(v)
        why = refusal(v)
        if why and not force:
            op.done(Outcome.REFUSED, why, release=v.baseline.release)
            raise EndRefused(f"refused (blocking-changes): {why}. Nothing was started; `maintenance end --force` "
                             "overrides this refusal")
        base = v.baseline
        if base.release is None:
            result = EndResult(v, EndOutcome.NOTHING_SERVED, "nothing served when the window began")
        elif v.serves_again:
            result = EndResult(v, EndOutcome.STILL_SERVING, f"release {v.serving_now.id} serves the baseline's plan "
                                                            f"{base.plan_hash}: nothing to bring back")
        else:
            result = _bring_back(v, op, inventory_path, idoc, events, yes, opts, endpoint_at)
        if result.ok:
            result.closed = _close(op, base, result)
        else:
            op.done(result.outcome, f"{said(base.reason)}; the window stays open: {result.detail}"[:900],
                    release=base.release, **_window_fields(base, result, None))
        return result


def _bring_back(v: VerifyResult, op: Operation, inventory_path: str, idoc, events: Events, yes: bool,
                options: UpOptions, endpoint_at: Callable[[str, int], Endpoint]) -> EndResult:
    base = v.baseline
    try:
        with signals_interrupt():
            done = rollback_mod.roll_back(
                op, base.release, events, inventory_path=inventory_path, inventory_doc=idoc, yes=yes,
                options=options, endpoint_at=endpoint_at,
                announce=lambda _: events.note(f"bringing back release {base.release} (plan {base.plan_hash}) by a "
                                               "rollback, every wait and check"))
    except rollback_mod.InventoryChanged as exc:
        return EndResult(v, EndOutcome.FAILED, f"{exc}: `maintenance end --yes` deploys it anyway")
    except rollback_mod.RollbackRefused as exc:
        return EndResult(v, EndOutcome.FAILED, f"rollback to release {base.release} refused: {exc}")
    except DeployFailed as exc:
        return EndResult(v, EndOutcome.FAILED, f"the rollback to release {base.release} failed: {exc}")
    return EndResult(v, EndOutcome.BROUGHT_BACK, f"release {base.release} serves again as release {done.release} "
                     f"(plan {done.plan_hash}) at {done.endpoint}", up=done)


def _window_fields(base: Baseline, result: EndResult, closed_at: float | None) -> dict:
    return {"reason": base.reason, "opened_at": base.opened_at, "opened_by": base.by, "closed_at": closed_at,
            "window_outcome": str(result.outcome),
            "changes": [c.text()[:160] for c in result.verify.drift.changes[:8]]}  # an audit line stays < PIPE_BUF


def _close(op: Operation, base: Baseline, result: EndResult) -> Baseline:
    """The baseline rewritten as closed on every node that answers, and the operation's audit line."""
    now = time.time()
    closed = base.touch(state=WindowState.CLOSED, closed_at=now, outcome=f"{result.outcome}: {result.detail}")
    missed = store.write(op.cluster, op.inventory, closed, op.alive)
    for node, why in missed.items():
        op.events.warn(f"could not mark the baseline closed: {why}", node)
    op.done(result.outcome, f"{said(base.reason)}; window {_when(base.opened_at)} - {_when(now)}; {result.detail}",
            release=result.up.release if result.up else base.release, nodes=missed,
            **_window_fields(base, result, now))
    return closed


def _when(stamp: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(stamp))
