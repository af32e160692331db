"""Make every node hold the pinned image: compare identities, then stream `docker save | docker load`.

Node to node over the fabric when the source can SSH to the destination (host key checked on the node),
otherwise relayed through the controller. Streamed either way: no copy of the image ever lands on disk
outside the engines.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Callable

from ..transport.group import on_all
from ..transport.node import NodeConnection, NodeError, drain
from .images import ImageIdentity, image_size, inspect_image, inspect_images, taggable

CHUNK = 1 << 20


class ImageConflict(NodeError):
    """A node holds a different image under the recipe's reference."""


@dataclass
class NodeImage:
    conn: NodeConnection
    pinned: ImageIdentity | None  # the pinned ID, if the node has it
    by_ref: ImageIdentity | None  # what the reference points to on this node


@dataclass
class SyncPlan:
    image_id: str
    ref: str
    nodes: list[NodeImage]
    source: NodeImage | None = None
    missing: list[NodeImage] = field(default_factory=list)
    conflicts: list[NodeImage] = field(default_factory=list)

    @property
    def in_sync(self) -> bool:
        return not self.missing and not self.conflicts


def survey(conns: list[NodeConnection], image_id: str, ref: str) -> SyncPlan:
    """Ask every node (in parallel) what it has under the pinned ID and under the reference."""
    def look(conn: NodeConnection) -> NodeImage:
        refs = [image_id, ref] if taggable(ref) else [image_id]
        found = inspect_images(conn, refs)
        return NodeImage(conn, found[0], found[1] if len(found) > 1 else None)

    found = on_all(conns, look, lambda c: c.name)
    plan = SyncPlan(image_id, ref, [found[c.name] for c in conns])
    holders = [n for n in plan.nodes if n.pinned is not None]
    plan.source = holders[0] if holders else None
    plan.missing = [n for n in plan.nodes if n.pinned is None]
    reference = plan.source.pinned if plan.source else None
    for node in plan.nodes:
        if node.by_ref is not None and node.by_ref.id != image_id and not (reference and node.by_ref.same_content(reference)):
            plan.conflicts.append(node)
        elif node.pinned is not None and reference is not None and not node.pinned.same_content(reference):
            plan.conflicts.append(node)
    return plan


def can_reach(src: NodeConnection, dst_host: str, dst_user: str) -> bool:
    """True when `src` can SSH to the destination with a host key it already trusts (never adds one)."""
    result = src.run(["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", "-o", "ConnectTimeout=5",
                      f"{dst_user}@{dst_host}", "true"], timeout=20)
    return result.ok


def transfer_direct(src: NodeConnection, dst_host: str, dst_user: str, image_id: str) -> None:
    """`docker save` on the source piped over the fabric into `docker load` on the destination."""
    src.run_script(
        'set -o pipefail; docker save "$1" | ssh -o BatchMode=yes -o StrictHostKeyChecking=yes '
        '-o Compression=no "$2" docker load',
        image_id, f"{dst_user}@{dst_host}", timeout=None, check=True)


def transfer_relay(src: NodeConnection, dst: NodeConnection, image_id: str,
                   progress: Callable[[int, int], None] | None = None) -> int:
    """Pump `docker save` from one node into `docker load` on another through this process."""
    total = image_size(src, image_id)
    save = src.exec_channel(["docker", "save", image_id])
    load = dst.exec_channel(["docker", "load"])
    errors: list[str] = []

    def collect_stderr(channel, who: str) -> None:
        data = b""
        while chunk := channel.recv_stderr(65536):
            data += chunk
        if data.strip():
            errors.append(f"{who}: {data.decode(errors='replace').strip()}")

    save_errors = threading.Thread(target=collect_stderr, args=(save, src.name), daemon=True)
    save_errors.start()
    moved = 0
    try:
        while chunk := save.recv(CHUNK):
            load.sendall(chunk)
            moved += len(chunk)
            if progress:
                progress(moved, total)
        load.shutdown_write()
        _, load_err = drain(load)
        save_errors.join(10)
        save_code, load_code = save.recv_exit_status(), load.recv_exit_status()
    finally:
        save.close()
        load.close()
    if save_code != 0 or load_code != 0:
        detail = "; ".join(errors + ([load_err.decode(errors="replace").strip()] if load_err.strip() else []))
        raise NodeError(dst.name, f"image transfer from {src.name} failed (save exit {save_code}, load exit {load_code}): {detail}")
    return moved


def tag(conn: NodeConnection, image_id: str, ref: str) -> None:
    if taggable(ref):
        conn.run(["docker", "tag", image_id, ref], timeout=30, check=True)


def verify(conn: NodeConnection, image_id: str, expected: ImageIdentity) -> ImageIdentity:
    """After a load: the node must report the same identity (ID, or layer DiffIDs across backends)."""
    got = inspect_image(conn, image_id)
    if got is None or not got.same_content(expected):
        raise NodeError(conn.name, f"after loading, the image does not match: expected {expected.short()}, got "
                                   f"{got.short() if got else 'nothing'}")
    return got
