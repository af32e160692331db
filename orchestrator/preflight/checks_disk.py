"""Disk facts and checks: the JIT cache's filesystem (never a network one), and room for the image transfer.

A node that lacks the pinned image gets it by `docker load`, which needs room for the archive stream's
unpacked layers in Docker's root dir; twice the image's size is what we ask for (layers are unpacked while
the compressed-or-not tar is still arriving).
"""

from __future__ import annotations

from ..config.load import Deployment
from ..facts import engine
from ..facts.core import Observed, fact
from ..checks.verdict import Cell, Scope, Status, Verdict
from .registry import check, missing

Seen = dict[str, dict[str, Observed]]

NETWORK_FS = {"nfs", "nfs4", "cifs", "smb2", "smbfs", "fuse.sshfs", "sshfs", "lustre", "glusterfs", "ceph",
              "fuse.glusterfs", "fuse.cephfs", "9p", "afs"}


@fact("jit_fs", 'stat -f -c %T -- "$1"', args=lambda i: [i.node.jit_cache])
def parse_statfs(stdout: str) -> str:
    """`stat -f -c %T PATH`: the filesystem type name (ext2/ext3, xfs, nfs, tmpfs, overlayfs...)."""
    value = stdout.strip()
    if not value or " " in value:
        raise ValueError(f"not a filesystem type: {value!r}")
    return value


# "$1" the pinned image ID. Prints: the Docker root dir's free bytes, then the image's size or "absent".
_DISK = r'''root=$(docker info --format '{{.DockerRootDir}}') || exit 1
df -PB1 -- "$root" | awk 'NR==2 {print $4}'
docker image inspect --format '{{.Size}}' "$1" 2>/dev/null || echo absent'''


@fact("image_disk", _DISK, args=lambda i: [i.plan.image_id], api=engine.Op.IMAGE_DISK)
def parse_image_disk(stdout: str) -> dict:
    """(free bytes under DockerRootDir, the pinned image's size on this node or None when absent)."""
    lines = [line.strip() for line in stdout.splitlines() if line.strip()]
    if len(lines) != 2:
        raise ValueError(f"expected 2 lines, got {len(lines)}")
    return {"free": int(lines[0]), "size": None if lines[1] == "absent" else int(lines[1])}


@check("jit-filesystem", ("jit_fs",), Scope.NODE, field_note=2)
def jit_filesystem(seen: Seen, dep: Deployment) -> Verdict:
    cells = missing(seen, ("jit_fs",))
    bad = []
    for node, facts in seen.items():
        if node in cells:
            continue
        fs = facts["jit_fs"].value
        if fs.lower() in NETWORK_FS:
            cells[node] = Cell(Status.FAIL, f"{dep.inventory.node(node).jit_cache} is on {fs}")
            bad.append(node)
        else:
            cells[node] = Cell(Status.OK, f"{dep.inventory.node(node).jit_cache} on {fs}")
    fix = (f"the JIT cache on {', '.join(bad)} is on a network filesystem: both ranks compiling into it half-killed "
           "a cluster (field note 2); point jit_cache at a local disk") if bad else ""
    return Verdict("jit-filesystem", Scope.NODE, cells, fix, 2)


def _gb(n: int) -> str:
    return f"{n / 1e9:.1f} GB"


@check("image-disk", ("image_disk",), Scope.NODE, field_note=1)
def image_disk(seen: Seen, dep: Deployment) -> Verdict:
    cells = missing(seen, ("image_disk",))
    sizes = [f["image_disk"].value["size"] for n, f in seen.items() if n not in cells and f["image_disk"].value["size"]]
    size = max(sizes, default=None)
    short = []
    for node, facts in seen.items():
        if node in cells:
            continue
        v = facts["image_disk"].value
        if v["size"] is not None:
            cells[node] = Cell(Status.OK, f"holds the image ({_gb(v['size'])}); {_gb(v['free'])} free")
        elif size is None:
            cells[node] = Cell(Status.SKIP, f"no node holds the image to size it; {_gb(v['free'])} free")
        elif v["free"] < 2 * size:
            cells[node] = Cell(Status.FAIL, f"{_gb(v['free'])} free, the load needs {_gb(2 * size)}")
            short.append(node)
        else:
            cells[node] = Cell(Status.OK, f"{_gb(v['free'])} free for a {_gb(size)} image")
    fix = (f"free space in Docker's root dir on {', '.join(short)} (docker system df; `spark-deploy prune`)"
           if short else "")
    return Verdict("image-disk", Scope.NODE, cells, fix, 1)
