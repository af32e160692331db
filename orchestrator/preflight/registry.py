"""Checks: registered by decorator, each naming the facts it needs and its scope, judging them into
ok / warn / fail / skip per node with the evidence and a one-line fix.

A check function is pure: it gets every node's Observed facts and the deployment, and returns a Verdict.
It never runs a command; gathering is facts.py's job, so the whole registry costs one SSH round trip
per node.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Callable

from ..config.load import Deployment
from ..facts.core import FACTS, Observed


class Scope(StrEnum):
    NODE = "per node"  # each node judged alone
    PARITY = "parity"  # the nodes must agree
    HEAD = "head only"


class Status(StrEnum):
    OK = "ok"
    WARN = "warn"
    FAIL = "fail"
    SKIP = "skip"  # could not be judged (a fact is missing): says why, never passes silently


_ORDER = {Status.OK: 0, Status.SKIP: 1, Status.WARN: 2, Status.FAIL: 3}


def worst(*statuses: Status) -> Status:
    """The status that decides: fail over warn over skip over ok."""
    return max(statuses, key=_ORDER.__getitem__, default=Status.SKIP)


@dataclass
class Cell:
    status: Status
    value: str  # what was seen on that node


@dataclass
class Verdict:
    name: str
    scope: Scope
    cells: dict[str, Cell]
    fix: str = ""
    field_note: int | None = None

    @property
    def status(self) -> Status:
        return worst(*(c.status for c in self.cells.values()))

    def failed_nodes(self, strict: bool = False) -> list[str]:
        bad = {Status.FAIL} | ({Status.WARN} if strict else set())
        return [n for n, c in self.cells.items() if c.status in bad]

    def as_dict(self) -> dict:
        return {"name": self.name, "scope": str(self.scope), "status": str(self.status), "fix": self.fix,
                "field_note": self.field_note,
                "per_node": {n: {"status": str(c.status), "value": c.value} for n, c in self.cells.items()}}


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
