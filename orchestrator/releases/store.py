"""Release records on the nodes: one JSON file per release in every node's state dir.

Written to EVERY node (atomic rename, fsynced), so losing the controller or any one node loses no history.
Reading collects every node's copy and reconciles them: the newest version of each record wins, and a
node whose copy is missing or older is named. The state goes with the servers (Kamal's lesson); this
machine keeps nothing that is the truth.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass, field

from pydantic import ValidationError

from ..config.inventory import Inventory
from ..transport.group import Cluster, GroupError
from ..transport.node import NodeConnection
from .keys import cluster_key
from .record import Release

READ = r'''shopt -s nullglob  # "$1" the releases dir
d="$1"
if [ ! -d "$d" ]; then echo "MISSING"; exit 0; fi
echo "DIR"
for f in "$d"/*.json; do cat -- "$f"; echo; done'''


# "$1" the record's path, "$2" its text: the same atomic, durable replace as NodeConnection.put_file (written
# beside it, fsynced, renamed over it, the directory fsynced) in ONE round trip instead of three.
_WRITE = r'''dir=$(dirname -- "$1"); tmp="$1.tmp-$$"
mkdir -p -- "$dir" || exit 1
{ printf '%s' "$2" > "$tmp" && chmod 644 -- "$tmp" && sync -- "$tmp" && mv -f -- "$tmp" "$1" && sync -- "$dir"; } ||
  { rm -f -- "$tmp"; exit 1; }'''
INLINE_MAX = 64 * 1024  # a record passed as an argument stays far below Linux's 128 KiB per argument


def releases_dir(inventory: Inventory, node: str) -> str:
    return posixpath.join(inventory.node(node).state_dir, "releases", cluster_key(inventory))


def record_path(inventory: Inventory, node: str, release_id: int) -> str:
    return posixpath.join(releases_dir(inventory, node), f"{release_id:06d}.json")


@dataclass
class NodeCopy:
    """What one node holds: its records by ID, or why it could not be read."""

    node: str
    records: dict[int, Release] = field(default_factory=dict)
    missing: bool = False  # no releases directory at all
    error: str | None = None  # unreachable, unreadable
    corrupt: list[str] = field(default_factory=list)


def parse_copy(node: str, stdout: str) -> NodeCopy:
    """Pure: the output of _READ -> the node's records (a line that is not a record is named, not fatal)."""
    lines = stdout.splitlines()
    if not lines or lines[0] == "MISSING":
        return NodeCopy(node, missing=True)
    copy = NodeCopy(node)
    for line in lines[1:]:
        if not line.strip():
            continue
        try:
            record = Release.model_validate(json.loads(line))
        except (ValueError, ValidationError) as exc:
            copy.corrupt.append(f"{line[:60]}...: {str(exc).splitlines()[0]}")
            continue
        copy.records[record.id] = record
    return copy


def read_copy(conn: NodeConnection, inventory: Inventory) -> NodeCopy:
    result = conn.run_script(READ, releases_dir(inventory, conn.name), timeout=60)
    if not result.ok:
        return NodeCopy(conn.name, error=f"cannot read {releases_dir(inventory, conn.name)}: "
                                          f"{result.stderr.strip() or f'exit {result.exit_code}'}")
    return parse_copy(conn.name, result.stdout)


@dataclass
class History:
    """Every release known to any node, newest first, and where the copies disagree."""

    releases: list[Release]
    disagreements: dict[str, list[str]] = field(default_factory=dict)  # node -> what is wrong with its copy
    behind: dict[str, list[int]] = field(default_factory=dict)  # node -> release IDs it lacks or has older

    def get(self, release_id: int) -> Release | None:
        return next((r for r in self.releases if r.id == release_id), None)

    @property
    def next_id(self) -> int:
        return max((r.id for r in self.releases), default=0) + 1


def reconcile(copies: list[NodeCopy]) -> History:
    """Pure: the newest version (updated_at) of every record wins; every node that lacks it, or holds an
    older version, is named."""
    readable = [c for c in copies if c.error is None]
    hashes: dict[int, str] = {}  # id(record) -> its content hash, each computed once (a JSON dump of the record)

    def digest(record: Release) -> str:
        if id(record) not in hashes:
            hashes[id(record)] = record.content_hash()
        return hashes[id(record)]

    newest: dict[int, Release] = {}
    for copy in readable:
        for rid, record in copy.records.items():
            best = newest.get(rid)
            if best is None or (record.updated_at, digest(record)) > (best.updated_at, digest(best)):
                newest[rid] = record
    history = History(sorted(newest.values(), key=lambda r: r.id, reverse=True))
    for copy in copies:
        notes: list[str] = []
        if copy.error is not None:
            notes.append(copy.error)
        elif copy.missing and newest:
            notes.append(f"has no release records at all (its state dir was lost?): {len(newest)} release(s) "
                         "known from the other node(s)")
            history.behind[copy.node] = sorted(newest)
        else:
            lacking = sorted(rid for rid in newest if rid not in copy.records)
            older = sorted(rid for rid, r in copy.records.items() if digest(r) != digest(newest[rid]))
            if lacking:
                notes.append("lacks release(s) " + ", ".join(map(str, lacking)))
            if older:
                notes.append("holds an older copy of release(s) " + ", ".join(map(str, older)))
            if lacking or older:
                history.behind[copy.node] = lacking + older
        notes += [f"unreadable record: {why}" for why in copy.corrupt]
        if notes:
            history.disagreements[copy.node] = notes
    return history


def read_copies(cluster: Cluster, inventory: Inventory, conns: list[NodeConnection]) -> list[NodeCopy]:
    """Each node's copy, read in parallel; a node that could not be read is a copy with its error."""
    try:
        found = cluster.each(lambda conn: read_copy(conn, inventory), conns)
        return [found[c.name] for c in conns]
    except GroupError as exc:
        return [exc.results[c.name] if c.name in exc.results else NodeCopy(c.name, error=str(exc.failures[c.name]))
                for c in conns]


def read_history(cluster: Cluster, inventory: Inventory, conns: list[NodeConnection] | None = None) -> History:
    """Every reachable node's copy, reconciled. Unreachable nodes are named in `disagreements`."""
    return reconcile(read_copies(cluster, inventory, conns if conns is not None else cluster.nodes))


def write_release(cluster: Cluster, inventory: Inventory, release: Release,
                  conns: list[NodeConnection] | None = None) -> None:
    """The record on every node (atomic, durable); GroupError names the nodes where it could not be written."""
    text = json.dumps(release.model_dump(mode="json"), sort_keys=True, separators=(",", ":")) + "\n"
    cluster.each(lambda conn: put_record(conn, record_path(inventory, conn.name, release.id), text),
                 conns if conns is not None else cluster.nodes)


def put_record(conn: NodeConnection, path: str, text: str) -> None:
    """One round trip for a record (no secret is ever in one: it may travel as an argument); a record too
    large for an argument goes through SFTP (three round trips)."""
    if len(text.encode()) > INLINE_MAX:
        conn.put_file(path, text)
        return
    conn.run_script(_WRITE, path, text, timeout=30, check=True)


def repair(cluster: Cluster, inventory: Inventory, history: History) -> list[str]:
    """Copy the newest version of every record to the nodes that lack it (under the deploy lock)."""
    done = []
    for node, ids in history.behind.items():
        conn = cluster[node]
        for rid in ids:
            write_release(cluster, inventory, history.get(rid), [conn])
        done.append(f"{node}: restored {len(ids)} release record(s) from the other node(s)")
    return done
