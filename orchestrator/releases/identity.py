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
import re
import secrets
import time
from collections.abc import Callable
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
_ID = re.compile(r"[a-z0-9][a-z0-9._-]{0,62}")  # an inventory's `cluster:` name: it becomes a path and a label


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
            found = cls(**{k: data[k] for k in cls.__dataclass_fields__})
        except (ValueError, TypeError, KeyError):
            return None
        return found if isinstance(found.id, str) and _ID.fullmatch(found.id) else None

    def __str__(self) -> str:
        return f"{self.id!r} (token {self.token})"


class IdentityMismatch(Exception):
    """The inventory's nodes, or its `cluster_id`, belong to more than one cluster: nothing was changed."""

    def __init__(self, message: str, nodes: list[str]):
        self.nodes = nodes
        super().__init__(message + "; nothing was changed")


def identity_path(inventory: Inventory, node: str) -> str:
    return posixpath.join(inventory.node(node).state_dir, FILE)


@dataclass(frozen=True)
class Asker:
    """Who asks the nodes, in the words of the messages: the head's name, what the inventory (or setup's
    --cluster) calls the cluster and its `cluster_id`, where each node keeps the file, and how to run one
    call on several connections at once (Cluster.each, or setup's on_all)."""

    head: str
    name: str
    declared: str | None
    path: Callable[[str], str]
    each: Callable[[Callable[[NodeConnection], object], list[NodeConnection]], dict]

    @classmethod
    def of(cls, cluster: Cluster, inventory: Inventory) -> "Asker":
        return cls(inventory.head, inventory.cluster, inventory.cluster_id,
                   lambda node: identity_path(inventory, node), lambda fn, conns: cluster.each(fn, conns))


def read(asker: Asker, conns: list[NodeConnection]) -> dict[str, Identity | None]:
    """What each of `conns` holds (None: nothing yet). A file that is not an identity is refused by name."""
    said = asker.each(lambda c: c.run_script(_READ, asker.path(c.name), timeout=30, check=True), conns)
    held: dict[str, Identity | None] = {}
    for node, result in said.items():
        text = result.stdout.strip()
        held[node] = Identity.parse(text) if text else None
        if text and held[node] is None:
            raise IdentityMismatch(f"{node}: {asker.path(node)} is not a cluster identity spark-deploy wrote "
                                   "(damaged?): move it aside if this node belongs to this cluster", [node])
    return held


def _judge(asker: Asker, held: dict[str, Identity | None], head: Identity | None) -> None:
    if head is not None and asker.declared is not None and head.id != asker.declared:
        raise IdentityMismatch(f"the inventory says cluster_id {asker.declared!r} but its head {asker.head} "
                               f"belongs to cluster {head}: this inventory names another cluster's head (fix "
                               "`cluster_id:` or `head:`)", [asker.head])
    ours = head.id if head is not None else (asker.declared or asker.name)
    first: tuple[str, Identity] | None = None  # with no head's to compare with: the first peer's
    for node, other in held.items():
        if node == asker.head or other is None:
            continue
        if head is None and first is None:
            first = (node, other)
        token = head.token if head is not None else first[1].token
        if other.id != ours or other.token != token:
            if head is not None:
                whose = f"the head {asker.head} to cluster {head}"
            elif other.id == ours:  # the same name, another token: two clusters called alike
                whose = f"{first[0]} to cluster {first[1]}"
            else:
                whose = f"this inventory to cluster {ours!r}"
            raise IdentityMismatch(f"{node} belongs to cluster {other}, {whose}: one inventory names nodes of "
                                   f"two clusters (if {node} was moved here on purpose, remove its "
                                   f"{asker.path(node)})", [node])


def claim(asker: Asker, conns: list[NodeConnection], *,
          write: bool) -> tuple[Identity | None, dict[str, Identity | None]]:
    """Read what the answering nodes hold and refuse a mixture; with `write` (a command that will change the
    cluster, or setup) give the head, then every node that holds none, the cluster's identity. The head's
    identity (None: it holds none, and was not written or did not answer) and what every node held."""
    held = read(asker, conns)
    head = held.get(asker.head)
    _judge(asker, held, head)
    if not write or asker.head not in held:
        return head, held
    if head is None:
        conn = next(c for c in conns if c.name == asker.head)
        # a head that lost its identity (a wiped state dir, a replaced machine) takes back its peers'
        mine = next((i for i in held.values() if i is not None), None) or \
            Identity(asker.declared or asker.name, secrets.token_hex(8), asker.name, time.time())
        lines = conn.run_script(_CREATE, asker.path(conn.name), mine.to_text(), timeout=30,
                                check=True).stdout.splitlines()
        if lines[:1] == ["HELD"]:  # another command's first use won: its identity is the cluster's
            head = Identity.parse("\n".join(lines[1:]))
        elif lines[:1] == ["WRITTEN"]:
            head = mine
        if head is None:  # UNWRITABLE: the lock, taken next, says so with the fix
            return None, held
        held[asker.head] = head
        _judge(asker, held, head)
    missing = [c for c in conns if held.get(c.name) is None]
    if missing:
        asker.each(lambda c: c.run_script(_CREATE, asker.path(c.name), head.to_text(), timeout=30, check=True),
                   missing)
    return head, held


def resolve(cluster: Cluster, inventory: Inventory, conns: list[NodeConnection], *, write: bool) -> str:
    """claim() for an inventory's open cluster; the id its state is keyed by from now on in this process
    (the head's; with the head silent, what the others hold; else the inventory's own)."""
    asker = Asker.of(cluster, inventory)
    head, held = claim(asker, conns, write=write)
    key = head.id if head is not None else next((i.id for i in held.values() if i is not None), inventory.key)
    remember(inventory, key)
    return key
