"""The fabric's measured figures, and the baseline they are judged against: one JSON file per cluster in
every node's state dir, beside the release history, replaced atomically.

    <state_dir>/fabric/<cluster>.json

Read from every node; the newest (`measured_at`) wins, so a node that was down at `--save` does not lose it.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field

from pydantic import BaseModel, ConfigDict, ValidationError

from ..config.inventory import Inventory
from ..facts.fabric_perf import Method
from ..releases.keys import cluster_key
from ..transport.copies import read_copies, write_copies
from ..transport.group import Cluster
from ..transport.node import NodeConnection

SCHEMA = 1
ARROW = "→"
BOTH = "↔"


class Direction(BaseModel):
    """What arrived from `src` at `dst` (the client on src sends, the server on dst counts)."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    src: str
    dst: str
    gbit_s: float
    detail: str = ""

    @property
    def name(self) -> str:
        return f"{self.src}{ARROW}{self.dst}"


class Link(BaseModel):
    """One pair of nodes over their fabric addresses: both directions and the latency."""

    model_config = ConfigDict(extra="forbid", frozen=True)
    a: str
    b: str
    directions: tuple[Direction, ...]
    latency_us: float | None = None  # one way (rdma) or TCP round trip (iperf3, stream)

    @property
    def name(self) -> str:
        return f"{self.a}{BOTH}{self.b}"


class Figures(BaseModel):
    """One run of `fabric test`: how, for how long each direction, and what every link showed."""

    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA
    cluster: str
    method: Method
    seconds: float
    measured_at: float
    links: list[Link]

    def link(self, a: str, b: str) -> Link | None:
        return next((lk for lk in self.links if {lk.a, lk.b} == {a, b}), None)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), indent=1, ensure_ascii=False) + "\n"


def baseline_path(inventory: Inventory, node: str) -> str:
    return posixpath.join(inventory.node(node).state_dir, "fabric", f"{cluster_key(inventory)}.json")


def parse_copy(stdout: str) -> Figures | None:
    """Pure: a node's file -> its baseline, None when it has none; ValueError when it is unreadable."""
    text = stdout.strip()
    if text == "MISSING" or not text:
        return None
    try:
        return Figures.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:
        raise ValueError(f"unreadable fabric baseline: {str(exc).splitlines()[0]}") from None


@dataclass
class Found:
    baseline: Figures | None
    problems: dict[str, str] = field(default_factory=dict)  # node -> why its copy was not used


def newest(copies: dict[str, Figures | None | Exception]) -> Found:
    """Pure: per node its copy (or the error reading it) -> the newest."""
    good = {n: c for n, c in copies.items() if isinstance(c, Figures)}
    found = Found(max(good.values(), key=lambda f: f.measured_at) if good else None)
    for node, copy in copies.items():
        if isinstance(copy, Exception):
            found.problems[node] = str(copy)
    return found


def read(cluster: Cluster, inventory: Inventory, conns: list[NodeConnection]) -> Found:
    return newest(read_copies(cluster, conns, lambda node: baseline_path(inventory, node), parse_copy))


def write(cluster: Cluster, inventory: Inventory, figures: Figures, conns: list[NodeConnection]) -> dict[str, str]:
    """The baseline on every given node (atomic, durable). Returns {node: why} where it could not be written."""
    return write_copies(cluster, conns, lambda node: baseline_path(inventory, node), figures.to_json())
