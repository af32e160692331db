"""The checks `up` always ran (docker, GPU, state dir, JIT cache, ports, image), as registry entries.

docker, gpu and state-dir judge facts (facts/basics.py), gathered in the one round trip per node with every
other fact; jit-cache, ports and image act to look and reuse checks/basics.py
and docker_cli/image_sync.py, so `up` and `preflight` judge alike.
"""

from __future__ import annotations

from ..checks import basics, writable
from ..checks.verdict import Cell, Scope, Status, Verdict
from ..docker_cli import image_sync
from ..facts import basics as _basics  # noqa: F401  (registers docker_version, gpu_list, state_dir)
from ..facts.core import FACTS, FactInput
from ..facts.replaced import parse_replaced
from ..transport.group import GroupError
from .registry import active_check, check, missing

def _guard(name: str, scope: Scope, probe) -> Verdict:
    try:
        return probe()
    except GroupError as exc:
        return Verdict(name, scope, {n: Cell(Status.SKIP, f"could not run: {e}") for n, e in exc.failures.items()})


def _judged(seen, facts: tuple[str, ...], probe) -> tuple[dict, list, dict]:
    """basics.per_node over gathered facts: (evidence, bad nodes, skipped cells) for nodes where it ran."""
    skipped = missing(seen, facts)
    results = {node: probe(node, f) for node, f in seen.items() if node not in skipped}
    return {n: text for n, (_, text) in results.items()}, [n for n, (good, _) in results.items() if not good], skipped


def _with_skips(verdict: Verdict, skipped: dict) -> Verdict:
    verdict.cells.update(skipped)
    return verdict


@check("docker", ("docker_version",), Scope.NODE)
def docker(seen, dep) -> Verdict:
    def probe(_node, f):
        r = f["docker_version"].value
        return r.code == 0, (f"engine {r.output.strip()}" if r.code == 0 else r.last_line())
    evidence, bad, skipped = _judged(seen, ("docker_version",), probe)
    return _with_skips(Verdict.per_node("docker", Scope.NODE, evidence, bad,
                                        f"start the Docker engine on {', '.join(bad)} (systemctl start docker)"),
                       skipped)


@check("gpu", ("gpu_list",), Scope.NODE)
def gpu(seen, dep) -> Verdict:
    def probe(_node, f):
        r = f["gpu_list"].value
        return r.code == 0 and "GPU" in r.output, r.first_line()
    evidence, bad, skipped = _judged(seen, ("gpu_list",), probe)
    return _with_skips(Verdict.per_node("gpu", Scope.NODE, evidence, bad, f"nvidia-smi sees no GPU on {', '.join(bad)}"),
                       skipped)


@check("state-dir", ("state_dir",), Scope.NODE)
def state_dir(seen, dep) -> Verdict:
    users: dict[str, str] = {}

    def probe(node, f):
        good, text, users[node] = writable.parse(f["state_dir"].value, dep.inventory.node(node).state_dir)
        return good, text
    evidence, bad, skipped = _judged(seen, ("state_dir",), probe)
    fix = ""
    if bad:
        fix = ("spark-deploy keeps releases, the lock and the audit log in the state dir as the login user "
               f"(no sudo): {writable.owner_fix(users[bad[0]], dep.inventory.node(bad[0]).state_dir, bad)}")
    return _with_skips(Verdict.per_node("state-dir", Scope.NODE, evidence, bad, fix), skipped)


@active_check("jit-cache", Scope.NODE, field_note=2)
def jit_cache(cluster, conns, dep, plan) -> Verdict:
    nodes = {n.name: n for n in dep.inventory.nodes}
    return _guard("jit-cache", Scope.NODE,
                  lambda: basics.jit_cache_local(cluster, nodes))


@active_check("ports", Scope.HEAD)
def ports(cluster, conns, dep, plan) -> Verdict:
    """Free, or held by this recipe's own serving containers (which `up` stops before it starts anything):
    a preflight of the recipe that serves must not call its own release "another process"."""
    def probe() -> Verdict:
        head = cluster.head
        listeners = basics.listening(head)
        verdict = basics.ports_judged(head.name, listeners, plan.ports)
        if not verdict.failed_nodes():
            return verdict
        fact = FACTS["replaced"]
        given = FactInput(dep.inventory.node(head.name), dep, plan)
        ours = {port: r.name for r in parse_replaced(head.run_script(fact.script, *fact.args(given), timeout=30,
                                                                    check=True).stdout)
                for port in (r.serve_port, r.master_port) if port is not None}
        return basics.ports_judged(head.name, listeners, plan.ports, ours)
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
