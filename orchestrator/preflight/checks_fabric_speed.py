"""The fabric's speed against its baseline (`fabric test --save`): a short run of the same measurement,
each direction judged against its baseline figure. Opt-in (`preflight --fabric`): it loads the fabric
for a few seconds per direction. A DAC negotiated down, a flaky cable or the wrong twin port passes every
reach check; the first sign is otherwise a slow model."""

from __future__ import annotations

from ..checks.verdict import Cell, Scope, Status, Verdict
from ..fabric import baseline as store
from ..fabric.judge import DEFAULT_MIN_FRACTION, judge
from ..fabric.measure import MeasureError, measure
from .registry import active_check

NAME = "fabric-speed"
SHORT_SECONDS = 3.0  # per direction: enough for TCP past slow start on a sim veth and a 200G DAC alike


@active_check(NAME, Scope.NODE, in_up=False, opt_in=True)
def fabric_speed(cluster, conns, dep, plan, *, min_fraction: float = DEFAULT_MIN_FRACTION,
                 seconds: float = SHORT_SECONDS) -> Verdict:
    inventory = dep.inventory
    nodes = [c.name for c in conns]
    found = store.read(cluster, inventory, conns)
    if found.baseline is None:
        return Verdict(NAME, Scope.NODE, {n: Cell(Status.WARN, "no fabric baseline") for n in nodes},
                       "record the fabric's figures once it is known good: `spark-deploy fabric test --save`")
    try:
        now = measure(cluster, inventory, conns, seconds, found.baseline.method)
    except MeasureError as exc:
        return Verdict(NAME, Scope.NODE, {n: Cell(Status.FAIL, f"not measured: {exc}") for n in nodes},
                       f"the fabric could not be measured: {exc}")
    verdict = judged(judge(found.baseline, now, min_fraction), nodes)
    for node, why in found.problems.items():
        verdict.cells.setdefault(node, Cell(Status.WARN, why))
    return verdict


def judged(judgment, nodes: list[str]) -> Verdict:
    """Pure: the judgment as cells per node (a node fails with every dropped direction it sends or receives)."""
    if judgment.method_changed:
        return Verdict(NAME, Scope.NODE, {n: Cell(Status.WARN, "not compared") for n in nodes},
                       judgment.method_changed)
    cells: dict[str, Cell] = {}
    for node in nodes:
        mine = [c for c in judgment.compared if node in c.nodes]
        bad = [c for c in mine if c.dropped]
        shown = "; ".join(c.said() for c in (bad or mine)) or "no link measured"
        cells[node] = Cell(Status.FAIL if bad else Status.OK, shown)
    drops = judgment.drops
    fix = ("; ".join(c.said() for c in drops) + ": look at that link's cable and port (a DAC negotiated down, "
           "a flaky cable, the wrong one of the twin ports), then `spark-deploy fabric test`") if drops else ""
    return Verdict(NAME, Scope.NODE, cells, fix)
