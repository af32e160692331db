"""The baseline on the nodes: one JSON file per cluster in every node's state dir, replaced atomically.

    <state_dir>/maintenance/<cluster>.json

Read from every node; the newest version (`updated_at`) wins, so a node that was down at `begin`, or
lost its disk in the window, does not lose the window. Closing it rewrites it with state "closed".
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field

from pydantic import ValidationError

from ..config.inventory import Inventory
from ..releases.keys import cluster_key
from ..transport.copies import read_copies, write_copies
from ..transport.group import Cluster
from ..transport.node import NodeConnection
from .baseline import Baseline

def baseline_path(inventory: Inventory, node: str) -> str:
    return posixpath.join(inventory.node(node).state_dir, "maintenance", f"{cluster_key(inventory)}.json")


@dataclass
class Found:
    """The newest baseline any node holds, and what could not be read where."""

    baseline: Baseline | None
    problems: dict[str, str] = field(default_factory=dict)  # node -> why its copy was not used
    holders: list[str] = field(default_factory=list)  # nodes whose copy is the newest


def parse_copy(stdout: str) -> Baseline | None:
    """Pure: a node's file -> its Baseline, None when it has none; ValueError when it is unreadable."""
    text = stdout.strip()
    if text == "MISSING" or not text:
        return None
    try:
        return Baseline.model_validate(json.loads(text))
    except (ValueError, ValidationError) as exc:
        raise ValueError(f"unreadable baseline: {str(exc).splitlines()[0]}") from None


def newest(copies: dict[str, Baseline | None | Exception]) -> Found:
    """Pure: per node its copy (or the error reading it) -> the newest, naming nodes that lack it."""
    found = Found(None)
    good = {n: c for n, c in copies.items() if isinstance(c, Baseline)}
    for node, copy in copies.items():
        if isinstance(copy, Exception):
            found.problems[node] = str(copy)
    if good:
        best = max(good.values(), key=lambda b: (b.updated_at, b.opened_at))
        found.baseline = best
        found.holders = [n for n, c in good.items() if c == best]
        for node in copies:
            if node not in found.holders and node not in found.problems:
                found.problems[node] = "holds no copy, or an older one, of the baseline"
    return found


def read(cluster: Cluster, inventory: Inventory, conns: list[NodeConnection]) -> Found:
    return newest(read_copies(cluster, conns, lambda node: baseline_path(inventory, node), parse_copy))


def write(cluster: Cluster, inventory: Inventory, baseline: Baseline, conns: list[NodeConnection]) -> dict[str, str]:
    """The baseline on every given node (atomic, durable). Returns {node: why} where it could not be written."""
    return write_copies(cluster, conns, lambda node: baseline_path(inventory, node), baseline.to_json())
