"""The one check-result type: a Verdict per check, a Cell per node (its status and what was seen there).

Below every judge: preflight's @checks, the probes of checks/basics.py and the boot judgement of
facts/boot.py all answer in it, so `up`, `preflight` and `boot status` show one shape."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


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

    @classmethod
    def per_node(cls, name: str, scope: Scope, evidence: dict[str, str], bad: list[str], fix: str = "",
                 field_note: int | None = None) -> Verdict:
        """What a probe saw on each node, the `bad` ones failing; the fix only when one did."""
        cells = {n: Cell(Status.FAIL if n in bad else Status.OK, text) for n, text in evidence.items()}
        return cls(name, scope, cells, fix if bad else "", field_note)

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
