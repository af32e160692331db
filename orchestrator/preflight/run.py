"""Run the registry: gather the facts every selected check needs (one SSH command per node), judge them.

Read only: nothing is started or changed on any node.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, wait
from dataclasses import dataclass, field

from ..bugs import is_bug, unexpected
from ..config.hints import suggest
from ..config.load import Deployment
from ..releases import identity
from ..render.plan import Plan
from ..transport.group import Cluster
from ..facts import boot_cache
from ..facts.core import gather
from ..checks.verdict import Cell, Scope, Status, Verdict
from .registry import CHECKS, CheckSpec, missing


class UnknownCheck(ValueError):
    pass


def select(only: list[str] | None = None, skip: list[str] | None = None, up_subset: bool = False,
           include: list[str] | None = None) -> list[CheckSpec]:
    """The checks to run: `only` (else all), minus `skip`; opt-in checks only when named in `only` or
    `include`; with `up_subset`, only those `up` runs first."""
    for name in (only or []) + (skip or []) + (include or []):
        if name not in CHECKS:
            raise UnknownCheck(f"no check named {name!r}{suggest(name, CHECKS)}; checks: {', '.join(sorted(CHECKS))}")
    named = set(only or []) | set(include or [])
    specs = [s for s in CHECKS.values() if (not only or s.name in named) and s.name not in (skip or [])]
    specs = [s for s in specs if not s.opt_in or s.name in named]
    return [s for s in specs if s.in_up or not up_subset or s.name in named]


@dataclass
class Report:
    verdicts: list[Verdict]
    nodes: list[str]
    unreachable: dict[str, str] = field(default_factory=dict)
    facts: dict[str, dict] = field(default_factory=dict)  # node -> fact name -> Observed, as gathered

    def failed(self, strict: bool = False) -> list[Verdict]:
        return [v for v in self.verdicts if v.failed_nodes(strict)]

    def ok(self, strict: bool = False) -> bool:
        return not self.failed(strict)

    def as_dict(self) -> dict:
        return {"ok": self.ok(), "nodes": self.nodes, "checks": [v.as_dict() for v in self.verdicts]}


def run_checks(dep: Deployment, plan: Plan, cluster: Cluster, specs: list[CheckSpec], opened: bool = False,
               per_boot: bool = False, also: tuple[str, ...] = ()) -> Report:
    """`cluster` is opened here as far as it goes (unless `opened`: `up` connected already): an unreachable
    node is the first failed check. `per_boot` (`up`): what cannot change without a reboot is read from
    the controller's cache while the node's boot id is the one it was read on (boot_cache.py). `also`: facts
    no selected check needs, gathered in the same round trip for the caller (Report.facts)."""
    conns, failures = (list(cluster.nodes), {}) if opened else cluster.open_reachable()
    if not opened and conns:  # `up` resolved the cluster's identity as it connected; `preflight` here
        plan = plan.for_cluster(identity.resolve(cluster, dep.inventory, conns, write=False))
    nodes = [n.name for n in dep.inventory.ranked]
    reach = Verdict("reachable", Scope.NODE, {
        n: Cell(Status.FAIL, str(failures[n])) if n in failures else Cell(Status.OK, "SSH, host key verified")
        for n in nodes}, "check the address, sshd, and that the host key is in known_hosts (verify its "
                         "fingerprint first)" if failures else "")
    names = sorted({f for s in specs for f in s.facts} | ({"boot_id"} if per_boot else set()) | set(also))
    cluster_name = dep.inventory.cluster
    boot = {c.name: boot_cache.load(cluster_name, c.name) for c in conns} if per_boot else None
    probes = [s for s in specs if s.probe]
    # the gather and every active check at once: the slowest sets the time, not their sum
    pool = ThreadPoolExecutor(max(1, len(probes)), thread_name_prefix="preflight-check")
    try:
        probed = {s.name: pool.submit(s.probe, cluster, conns, dep, plan) for s in probes}
        gathered = gather(cluster, conns, dep, plan, names, boot) if conns and names else None
        wait(probed.values())
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
    per_node = gathered.per_node if gathered else {}
    if boot is not None:
        boot_cache.remember(cluster_name, {n.name: n.address for n in dep.inventory.nodes}, per_node, boot)
    unreachable = {**{n: str(e) for n, e in failures.items()}, **(gathered.unreachable if gathered else {})}
    for node, why in (gathered.unreachable if gathered else {}).items():
        reach.cells[node] = Cell(Status.FAIL, f"gathering facts failed: {why}")
    verdicts = [reach]
    for spec in specs:
        try:
            verdict = probed[spec.name].result() if spec.probe else spec.judge(per_node, dep)
        except Exception as exc:  # noqa: BLE001 - never a pass: a crashed judge fails, a probe that could not run skips
            verdict = _broken(spec, exc, per_node)
        for node in unreachable:
            verdict.cells.setdefault(node, Cell(Status.SKIP, "unreachable"))
        verdict.cells = {n: verdict.cells[n] for n in nodes if n in verdict.cells}
        verdicts.append(verdict)
    return Report(verdicts, nodes, unreachable, per_node)


def _broken(spec: CheckSpec, exc: Exception, per_node: dict) -> Verdict:
    """A judge or probe that raised. A bug (KeyError, TypeError...) is an error, so it FAILS, named as a bug
    with the way around it; anything else (a node that stopped answering mid-probe) means the check could
    not run: a skip that says why."""
    if is_bug(exc):
        return Verdict(spec.name, spec.scope, {n: Cell(Status.FAIL, f"the check itself failed: {unexpected(exc)}")
                                               for n in per_node},
                       f"a bug in spark-deploy's {spec.name} check: report it; `--skip-check {spec.name}` goes on "
                       "without it", spec.field_note)
    return Verdict(spec.name, spec.scope, {n: Cell(Status.SKIP, f"the check could not run: {exc}") for n in per_node},
                   "", spec.field_note)


__all__ = ["Report", "UnknownCheck", "missing", "run_checks", "select"]
