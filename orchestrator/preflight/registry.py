"""Checks: registered by decorator, each naming the facts it needs and its scope, judging them into a
Verdict (checks/verdict.py): ok / warn / fail / skip per node with the evidence and a one-line fix.

A check function is pure: it gets every node's Observed facts and the deployment, and returns a Verdict.
It never runs a command; gathering is facts/core.py's job, so the whole registry costs one SSH round trip
per node.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

from ..config.load import Deployment
from ..checks.verdict import Cell, Scope, Status, Verdict
from ..facts.core import FACTS, Observed


Judge = Callable[[dict[str, dict[str, Observed]], Deployment], Verdict]


@dataclass(frozen=True)
class CheckSpec:
    name: str
    facts: tuple[str, ...]
    scope: Scope
    judge: Judge
    field_note: int | None = None
    in_up: bool = True  # part of the fast subset `up` runs first
    probe: Callable | None = None  # an active check: probe(cluster, conns, dep, plan) -> Verdict
    opt_in: bool = False  # runs only when named (--only, or a flag such as --verify-blobs): it is slow


CHECKS: dict[str, CheckSpec] = {}


def active_check(name: str, scope: Scope, *, field_note: int | None = None, in_up: bool = True,
                 opt_in: bool = False):
    """Register a check that must act to look (the JIT token test writes and removes a file; the port and
    image looks reuse up's own probes). It runs its own command per node, still read-only in effect."""
    def register(probe: Callable) -> Callable:
        if name in CHECKS:
            raise ValueError(f"check {name!r} registered twice")
        CHECKS[name] = CheckSpec(name, (), scope, lambda seen, dep: None, field_note, in_up, probe, opt_in)
        return probe
    return register


def check(name: str, facts: tuple[str, ...] | list[str], scope: Scope, *, field_note: int | None = None,
          in_up: bool = True):
    """Register a judge. Its facts must be registered already (import order: facts before checks)."""
    def register(judge: Judge) -> Judge:
        unknown = [f for f in facts if f not in FACTS]
        if unknown:
            raise ValueError(f"check {name!r} needs unknown fact(s) {unknown}")
        if name in CHECKS:
            raise ValueError(f"check {name!r} registered twice")
        CHECKS[name] = CheckSpec(name, tuple(facts), scope, judge, field_note, in_up)
        return judge
    return register


def missing(seen: dict[str, dict[str, Observed]], names: tuple[str, ...]) -> dict[str, Cell]:
    """Cells for nodes where a needed fact could not be read: skip, with the reason (a check then judges
    only the others)."""
    cells = {}
    for node, facts in seen.items():
        broken = [f"{n}: {facts[n].error}" for n in names if n in facts and not facts[n].ok]
        absent = [n for n in names if n not in facts]
        if broken or absent:
            cells[node] = Cell(Status.SKIP, "; ".join(broken + [f"{n}: not gathered" for n in absent]))
    return cells


def parity(name: str, seen: dict[str, dict[str, Observed]], fact_name: str, shown: Callable[[object], str],
           fix: str, *, status: Status = Status.FAIL, field_note: int | None = None) -> Verdict:
    """The common parity judge: every node's value must equal; the odd nodes out are marked."""
    cells = missing(seen, (fact_name,))
    values = {n: shown(f[fact_name].value) for n, f in seen.items() if n not in cells}
    counts: dict[str, int] = {}
    for v in values.values():
        counts[v] = counts.get(v, 0) + 1
    majority = max(counts, key=counts.get) if counts else None
    agree = len(counts) <= 1
    for node, value in values.items():
        cells[node] = Cell(Status.OK if agree or value == majority and counts[value] > 1 else status, value)
    if not agree:
        shown_all = ", ".join(f"{n}: {v}" for n, v in values.items())
        return Verdict(name, Scope.PARITY, cells, f"{fix} ({shown_all})", field_note)
    return Verdict(name, Scope.PARITY, cells, "", field_note)
