"""The audit log: one JSON line per action, appended on every node (who, when, command, release, outcome).

Append-only (`>>`, one write per line, well under PIPE_BUF so concurrent appends never interleave). Read
back from every node and merged by line ID, so a node that was down for an action is visible as such.
Audit lines carry names and outcomes, never a secret value: the command line is recorded as typed, and
no spark-deploy command takes a secret on its command line.
"""

from __future__ import annotations

import json
import posixpath
import secrets
import sys
import time
from dataclasses import dataclass, field

from ..config.inventory import Inventory
from ..transport.group import Cluster, GroupError
from ..transport.node import NodeConnection
from .keys import cluster_key
from .record import who

_APPEND = 'mkdir -p -- "$(dirname -- "$1")" && printf \'%s\\n\' "$2" >> "$1"'
_READ = '[ -f "$1" ] && cat -- "$1" || true'
MAX_LINE = 3500  # bytes; PIPE_BUF is 4096


def audit_path(inventory: Inventory, node: str) -> str:
    return posixpath.join(inventory.node(node).state_dir, "audit", f"{cluster_key(inventory)}.jsonl")


def command_line() -> list[str]:
    return ["spark-deploy", *sys.argv[1:]]


def entry(action: str, outcome: str, *, release: int | None = None, detail: str = "", **extra) -> dict:
    line = {"id": secrets.token_hex(6), "at": round(time.time(), 3), "by": who(), "command": command_line(),
            "action": action, "outcome": outcome}
    if release is not None:
        line["release"] = release
    if detail:
        line["detail"] = detail
    return {**line, **extra}


def append(cluster: Cluster, inventory: Inventory, line: dict, conns: list[NodeConnection] | None = None) -> dict[str, str]:
    """Append on every given node (default: every node with an open connection). Returns {node: why}
    for the nodes where it could not be written; the caller warns, the action itself stands."""
    text = json.dumps(line, sort_keys=True, separators=(",", ":"))
    if len(text.encode()) > MAX_LINE:
        line = {**line, "detail": str(line.get("detail", ""))[:500] + " [cut]"}
        text = json.dumps(line, sort_keys=True, separators=(",", ":"))[:MAX_LINE]
    targets = conns if conns is not None else [c for c in cluster.nodes if c.is_open]
    try:
        cluster.each(lambda conn: conn.run_script(_APPEND, audit_path(inventory, conn.name), text, timeout=30,
                                                  check=True, shield=True), targets)
    except GroupError as exc:
        return {node: str(why) for node, why in exc.failures.items()}
    return {}


@dataclass
class AuditLog:
    lines: list[dict]  # merged, oldest first
    missing_on: dict[str, int] = field(default_factory=dict)  # node -> how many merged lines it lacks
    unreadable: dict[str, str] = field(default_factory=dict)


def merge(per_node: dict[str, str | None]) -> AuditLog:
    """Pure: {node: file text, or None when unreadable} -> every line once, by time."""
    seen: dict[str, dict] = {}
    holders: dict[str, set[str]] = {}
    unreadable: dict[str, str] = {}
    for node, text in per_node.items():
        if text is None:
            unreadable[node] = "unreachable or unreadable"
            continue
        for raw in text.splitlines():
            try:
                line = json.loads(raw)
            except ValueError:
                continue
            if isinstance(line, dict) and "id" in line:
                seen.setdefault(line["id"], line)
                holders.setdefault(line["id"], set()).add(node)
    readable = [n for n, t in per_node.items() if t is not None]
    missing = {n: sum(1 for ids in holders.values() if n not in ids) for n in readable}
    return AuditLog(sorted(seen.values(), key=lambda l: (l.get("at", 0), l["id"])),
                    {n: k for n, k in missing.items() if k}, unreadable)


def read(cluster: Cluster, inventory: Inventory, conns: list[NodeConnection]) -> AuditLog:
    texts: dict[str, str | None] = {}

    def one(conn: NodeConnection) -> str:
        return conn.run_script(_READ, audit_path(inventory, conn.name), timeout=60, check=True).stdout

    try:
        texts.update(cluster.each(one, conns))
    except GroupError as exc:
        texts.update(exc.results)
        texts.update({node: None for node in exc.failures})
    return merge(texts)
