"""Disk checks: the JIT cache's filesystem (never a network one), and room for the image transfer (the
facts: facts/disk.py).

A node that lacks the pinned image gets it by `docker load`, which needs room for the archive stream's
unpacked layers in Docker's root dir; twice the image's size is what we ask for (layers are unpacked while
the compressed-or-not tar is still arriving).
"""

from __future__ import annotations

from ..checks.verdict import Cell, Scope, Status, Verdict
from ..config.load import Deployment
from ..facts.core import Observed
from ..facts.disk import NETWORK_FS
from .registry import check, missing

Seen = dict[str, dict[str, Observed]]


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
