"""A cluster's identity, held by its nodes: what the lock, the history, the audit log and the container
labels are keyed by, so the inventory's `cluster:` name is only a label.

`<state_dir>/cluster.json` on the head (and on every node, so a node that belongs to another cluster is
told apart) holds the id and a random token. It is written on first use: by `setup`, or by the first
command that takes the deploy lock and finds none. Its id is the name of the inventory that made it, so a
cluster that existed before identities keeps its history (its records, lock and labels already carry
that name: the first run adopts them, nothing moves). A second inventory that names the same head under
another `cluster:` reads the head's id and shares the one lock and history.

Refused before anything is read under the lock or changed, naming both: an inventory whose `cluster_id`
is not what its head holds, and a node that holds another cluster's identity than the head's.
"""

from __future__ import annotations

import json
import posixpath
import secrets
import time
from dataclasses import asdict, dataclass

from ..config.inventory import Inventory
from ..transport.group import Cluster
from ..transport.node import NodeConnection
from .keys import remember

FILE = "cluster.json"
# "$1" the identity file, "$2" ours. Written only where none is: a complete temp file hard-linked into place
# (`ln` refuses an existing one), so of two first uses at once one wins and the other reads the winner's.
_CREATE = r'''set -u
mkdir -p -- "$(dirname -- "$1")" 2>/dev/null || { echo UNWRITABLE; exit 0; }
tmp="$1.new-$$"
{ printf '%s' "$2" > "$tmp" && sync -- "$tmp"; } 2>/dev/null || { rm -f -- "$tmp"; echo UNWRITABLE; exit 0; }
if ln -- "$tmp" "$1" 2>/dev/null; then rm -f -- "$tmp"; echo WRITTEN; exit 0; fi
rm -f -- "$tmp"; echo HELD; cat -- "$1"'''
_READ = '[ -f "$1" ] && cat -- "$1"; true'  # "$1" the identity file: its text, or nothing

@dataclass(frozen=True)
class Identity:
    id: str  # what the state is keyed by
    token: str  # tells two clusters apart that were given the same name
    name: str  # the `cluster:` name of the inventory that made it (a label)
    created_at: float

    def to_text(self) -> str:
        return json.dumps(asdict(self), sort_keys=True)

    @classmethod
    def parse(cls, text: str) -> "Identity | None":
        try:
            data = json.loads(text)
            return cls(**{k: data[k] for k in cls.__dataclass_fields__})
        except (ValueError, TypeError, KeyError):
            return None

    def __str__(self) -> str:
        return f"{self.id!r} (token {self.token})"


class IdentityMismatch(Exception):
    """The inventory's nodes, or its `cluster_id`, belong to more than one cluster: nothing was changed."""

    def __init__(self, message: str, nodes: list[str]):
        self.nodes = nodes
        super().__init__(message + "; nothing was changed")


def identity_path(inventory: Inventory, node: str) -> str:
    return posixpath.join(inventory.node(node).state_dir, FILE)


def new_identity(inventory: Inventory) -> Identity:
    return Identity(inventory.key, secrets.token_hex(8), inventory.cluster, time.time())


def read(cluster: Cluster, inventory: Inventory, conns: list[NodeConnection]) -> dict[str, Identity | None]:
    """What each of `conns` holds (None: nothing yet). A file that is not an identity is refused by name."""
    said = cluster.each(lambda c: c.run_script(_READ, identity_path(inventory, c.name), timeout=30, check=True),
                        conns)
    held: dict[str, Identity | None] = {}
    for node, result in said.items():
        text = result.stdout.strip()
        held[node] = Identity.parse(text) if text else None
        if text and held[node] is None:
            raise IdentityMismatch(f"{node}: {identity_path(inventory, node)} is not a cluster identity "
                                   "spark-deploy wrote (damaged?): move it aside if this node belongs to this "
                                   "cluster", [node])
    return held


def _judge(inventory: Inventory, held: dict[str, Identity | None], head: Identity | None) -> None:
    declared, head_name = inventory.cluster_id, inventory.head
    if head is not None and declared is not None and head.id != declared:
        raise IdentityMismatch(f"the inventory says cluster_id {declared!r} but its head {head_name} belongs to "
                               f"cluster {head}: this inventory names another cluster's head (fix "
                               f"`cluster_id:` or `head:`)", [head_name])
    ours = head.id if head is not None else (declared or inventory.cluster)
    for node, other in held.items():
        if node == head_name or other is None:
            continue
        if other.id != ours or (head is not None and other.token != head.token):
            whose = f"the head {head_name} to cluster {head}" if head is not None else \
                f"this inventory to cluster {ours!r}"
            raise IdentityMismatch(f"{node} belongs to cluster {other}, {whose}: one inventory names nodes of "
                                   f"two clusters (if {node} was moved here on purpose, remove its "
                                   f"{identity_path(inventory, node)})", [node])


def resolve(cluster: Cluster, inventory: Inventory, conns: list[NodeConnection], *, write: bool) -> str:
    """Read what the answering nodes hold, refuse a mixture, and (`write`: a command that will change the
    cluster) give the head and every node that holds none this cluster's identity. Returns the id."""
    held = read(cluster, inventory, conns)
    head = held.get(inventory.head)
    _judge(inventory, held, head)
    if write and inventory.head in held:
        if head is None:
            conn = next(c for c in conns if c.name == inventory.head)
            mine = new_identity(inventory) if inventory.cluster_id is None else \
                Identity(inventory.cluster_id, secrets.token_hex(8), inventory.cluster, time.time())
            lines = conn.run_script(_CREATE, identity_path(inventory, conn.name), mine.to_text(), timeout=30,
                                    check=True).stdout.splitlines()
            if lines[:1] == ["HELD"]:  # another command's first use won: its identity is the cluster's
                head = Identity.parse("\n".join(lines[1:]))
            elif lines[:1] == ["WRITTEN"]:
                head = mine
            # UNWRITABLE: the lock, taken next, says so with the fix
            if head is not None:
                held[inventory.head] = head
                _judge(inventory, held, head)
        missing = [c for c in conns if held.get(c.name) is None and c.name != inventory.head]
        if head is not None and missing:
            cluster.each(lambda c: c.run_script(_CREATE, identity_path(inventory, c.name), head.to_text(),
                                                timeout=30, check=True), missing)
    key = head.id if head is not None else next(
        (i.id for i in held.values() if i is not None), inventory.key)
    remember(inventory, key)
    return key
