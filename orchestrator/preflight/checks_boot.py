"""The `boot` check: if this node rebooted now, what would come back, and is it what serves (field note 9)?

The boot facts and the judgement of each item against a plan hash are facts/boot.py's (deploy's boot
commands and maintenance use them too); this check runs that judgement against what the labels say
serves, or, when nothing serves, against the plan this recipe would make.
"""

from __future__ import annotations

from ..checks.verdict import Cell, Scope, Status, Verdict, worst
from ..config.load import Deployment
from ..facts.boot import BootMatch, Seen, node_boot, serving_comes_back, serving_from_seen
from ..releases.keys import cluster_key
from ..render.plan import build_plan
from .registry import check, missing


@check("boot", ("boot_units", "restart_policies"), Scope.NODE, field_note=9, in_up=False)
def boot(seen: Seen, dep: Deployment) -> Verdict:
    """Not in `up`'s subset: `up` changes what serves, so what came back before it is judged afterwards."""
    serving = serving_from_seen(seen, cluster_key(dep.inventory))
    reference = "the serving release"
    if not serving:  # nothing serves: judge against the release this recipe would make
        serving, reference = {build_plan(dep).plan_hash}, f"{dep.recipe.name}'s plan (nothing serves now)"
    cells = missing(seen, ("restart_policies",))
    others: list[str] = []
    absent: list[str] = []
    for node, facts in seen.items():
        if node in cells:
            continue
        nb = node_boot(facts, serving)
        bad = [i for i in nb.items if i.match is not BootMatch.SERVING]
        others += [f"{node}: {i.kind} {i.name} ({i.starts})" for i in bad if i.match is BootMatch.OTHER]
        shown = "; ".join(i.describe() for i in nb.items)
        if not nb.systemd:
            fails = [i for i in bad if i.match is BootMatch.OTHER]
            why = f"no systemd here ({nb.why}): units not judged"
            cells[node] = Cell(Status.FAIL if fails else Status.SKIP, f"{why}; {shown}" if shown else why)
            continue
        status = worst(Status.OK, *(i.status for i in bad))
        if not serving_comes_back(nb.items):
            absent.append(node)
            status = worst(status, Status.WARN)
            shown = f"{shown}; {reference} does not come back" if shown else f"{reference} does not come back"
        if nb.engine_enabled is False:
            shown += "; docker.service is not enabled (restart policies do not act at boot)"
        cells[node] = Cell(status, shown)
    fix = []
    if others:
        fix.append("comes back on boot and is not the serving release: " + "; ".join(others) +
                   " (field note 9): `spark-deploy boot enable RECIPE --yes` disables them")
    if absent:
        fix.append(f"{reference} does not come back on boot on {', '.join(absent)}: `spark-deploy boot enable RECIPE`")
    return Verdict("boot", Scope.NODE, cells, "; ".join(fix), 9)
