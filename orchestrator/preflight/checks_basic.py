"""The checks `up` always ran (docker, GPU, JIT cache, ports, image), as registry entries.

They reuse checks/basics.py and docker_cli/image_sync.py, so `up` and `preflight` judge alike.
"""

from __future__ import annotations

from ..checks import basics, writable
from ..docker_cli import image_sync
from ..transport.group import GroupError
from .facts import FACTS, FactInput
from .registry import Cell, Scope, Status, Verdict, active_check, worst
from .replaced import parse_replaced

_STATUS = {"ok": Status.OK, "warn": Status.WARN, "fail": Status.FAIL}


def _verdict(name: str, scope: Scope, result: basics.CheckResult, field_note: int | None = None) -> Verdict:
    """A basics.CheckResult as a Verdict: evidence keys are `node` or `node:detail` (ports)."""
    cells: dict[str, Cell] = {}
    for key, text in result.evidence.items():
        node, _, detail = key.partition(":")
        status = _STATUS[result.status] if node in result.bad else Status.OK
        shown = f"{detail} {text}" if detail else text
        if node in cells:
            cells[node] = Cell(worst(cells[node].status, status), f"{cells[node].value}; {shown}")
        else:
            cells[node] = Cell(status, shown)
    return Verdict(name, scope, cells, result.fix, field_note)



def _guard(name: str, scope: Scope, probe) -> Verdict:
    try:
        return probe()
    except GroupError as exc:
        return Verdict(name, scope, {n: Cell(Status.SKIP, f"could not run: {e}") for n, e in exc.failures.items()})


@active_check("docker", Scope.NODE)
def docker(cluster, conns, dep, plan) -> Verdict:
    return _guard("docker", Scope.NODE, lambda: _verdict("docker", Scope.NODE, basics.docker_answers(cluster)))


@active_check("gpu", Scope.NODE)
def gpu(cluster, conns, dep, plan) -> Verdict:
    return _guard("gpu", Scope.NODE, lambda: _verdict("gpu", Scope.NODE, basics.gpu_visible(cluster)))


@active_check("jit-cache", Scope.NODE, field_note=2)
def jit_cache(cluster, conns, dep, plan) -> Verdict:
    nodes = {n.name: n for n in dep.inventory.nodes}
    return _guard("jit-cache", Scope.NODE,
                  lambda: _verdict("jit-cache", Scope.NODE, basics.jit_cache_local(cluster, nodes), 2))


@active_check("state-dir", Scope.NODE)
def state_dir(cluster, conns, dep, plan) -> Verdict:
    nodes = {n.name: n for n in dep.inventory.nodes}
    return _guard("state-dir", Scope.NODE,
                  lambda: _verdict("state-dir", Scope.NODE, writable.state_dir(cluster, nodes)))


@active_check("ports", Scope.HEAD)
def ports(cluster, conns, dep, plan) -> Verdict:
    """Free, or held by this recipe's own serving containers (which `up` stops before it starts anything):
    a preflight of the recipe that serves must not call its own release "another process"."""
    def probe() -> Verdict:
        result = basics.ports_free(cluster, plan.ports)
        if result.ok:
            return _verdict("ports", Scope.HEAD, result)
        head = cluster.head
        fact = FACTS["replaced"]
        given = FactInput(dep.inventory.node(head.name), dep, plan)
        ours = {port: r.name for r in parse_replaced(head.run_script(fact.script, *fact.args(given), timeout=30,
                                                                    check=True).stdout)
                for port in (r.serve_port, r.master_port) if port is not None}
        taken = [p for p in plan.ports if result.evidence.get(f"{head.name}:{p}", "free") != "free"]
        for p in taken:
            if p in ours:
                result.evidence[f"{head.name}:{p}"] = f"held by {ours[p]} of this recipe, which up replaces"
        if all(p in ours for p in taken):
            result = basics.CheckResult("ports", "ok", result.evidence)
        return _verdict("ports", Scope.HEAD, result)
    return _guard("ports", Scope.HEAD, probe)


@active_check("image", Scope.NODE, field_note=1)
def image(cluster, conns, dep, plan) -> Verdict:
    """Present (by verified ID), or syncable from a node that holds it; equal DiffIDs where present."""
    survey = image_sync.survey(conns, plan.image_id, plan.image_ref)
    cells = {}
    for n in survey.nodes:
        name = n.conn.name
        if n.pinned is not None:
            cells[name] = Cell(Status.OK, f"holds {n.pinned.short()}")
        elif survey.source is not None:
            cells[name] = Cell(Status.OK, f"lacks it: up copies it from {survey.source.conn.name}")
        else:
            cells[name] = Cell(Status.FAIL, f"lacks {plan.image_id[:19]}")
    for n in survey.conflicts:
        cells[n.conn.name] = Cell(Status.WARN, f"{plan.image_ref} names another image here: "
                                              f"{(n.by_ref or n.pinned).short()} (up --sync replaces it)")
    fix = "" if survey.source else f"no node holds {plan.image_id}: docker load it on one node"
    return Verdict("image", Scope.NODE, cells, fix, 1)
