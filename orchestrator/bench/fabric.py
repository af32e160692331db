"""`fabric test`: every pair of nodes measured over the fabric (fabric/measure.py); with `save`, the
figures become the cluster's baseline on every node, inside one Operation (one audit line)."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..config.inventory import Inventory
from ..fabric import baseline as store
from ..fabric.baseline import Figures
from ..fabric.judge import Judgment, judge
from ..fabric.measure import DEFAULT_SECONDS, measure
from ..facts.fabric_perf import Method
from ..operation import AuditAction, Observation, Operation, Outcome, Reach
from ..runner.events import Events


@dataclass
class FabricRun:
    figures: Figures
    baseline: Figures | None = None  # the one this run was compared with (None: there was none)
    judgment: Judgment | None = None
    saved: bool = False
    problems: dict[str, str] = field(default_factory=dict)  # node -> why the baseline was not read/written there


def test(inventory: Inventory, *, seconds: float = DEFAULT_SECONDS, save: bool = False, method: Method | None = None,
         min_fraction: float = 0.8, events: Events | None = None) -> FabricRun:
    """Measure; compare with the baseline the nodes hold; with `save`, replace it (every node must answer,
    and the deploy lock is held so no deploy loads the fabric meanwhile)."""
    events = events or Events()
    if not save:
        with Observation(inventory, reach=Reach.ALL, what="measuring the fabric") as obs:
            return _run(obs.cluster, inventory, obs.alive, seconds, method, min_fraction, events)
    with Operation(inventory, events, AuditAction.FABRIC_BASELINE, reach=Reach.ALL) as op:
        run = _run(op.cluster, inventory, op.alive, seconds, method, min_fraction, events)
        failed = store.write(op.cluster, inventory, run.figures, op.alive)
        run.saved, run.problems = not failed, {**run.problems, **failed}
        shown = "; ".join(f"{d.name} {d.gbit_s:.3g} Gbit/s" for lk in run.figures.links for d in lk.directions)
        op.done(Outcome.OK if not failed else Outcome.INCOMPLETE, f"{run.figures.method}: {shown}",
                nodes=failed)
        return run


def _run(cluster, inventory, conns, seconds, method, min_fraction, events) -> FabricRun:
    found = store.read(cluster, inventory, conns)
    figures = measure(cluster, inventory, conns, seconds, method, progress=events.note)
    run = FabricRun(figures, found.baseline, problems=found.problems)
    if found.baseline is not None:
        run.judgment = judge(found.baseline, figures, min_fraction)
    return run
