"""`preflight --verify-blobs`: hash every blob of the model snapshot on every node and compare each
hash with the blob's name (field note 11; the scan: facts/blobs.py).

The default model checks compare blob NAMES across nodes: cheap, and enough when the cache was written by
a downloader that names blobs by their hash. A blob whose bytes rotted or were overwritten in place keeps
its name; only reading it finds that. This reads everything (167 GB takes minutes per node), so it runs
only when asked, on all nodes at once, and reports the hashing throughput so the next run can be planned.
"""

from __future__ import annotations

from ..checks.verdict import Cell, Scope, Status, Verdict
from ..facts.blobs import SCRIPT, BlobScan, parse_blob_scan, throughput
from ..transport.group import GroupError
from .registry import active_check


def judge_scan(scan: BlobScan) -> Cell:
    if scan.plain:
        return Cell(Status.SKIP, "a plain model directory: its files have no content-hash names to check")
    if scan.absent:
        return Cell(Status.FAIL, f"no snapshot: {scan.absent}")
    bad = [f for f in scan.files if not f.matches]
    if not bad:
        return Cell(Status.OK, f"every blob hashes to its name: {throughput(scan)}")
    shown = "; ".join(f"{f.name}: blob {f.blob[:16]} " + ("is missing" if f.digest == "missing" else
                      "has a name that is not a hash" if f.digest == "unnamed" else f"hashes to {f.digest[:16]}")
                      for f in bad[:4])
    more = f" (+{len(bad) - 4} more)" if len(bad) > 4 else ""
    return Cell(Status.FAIL, f"{shown}{more}; {throughput(scan)}")


@active_check("model-blobs", Scope.NODE, field_note=11, in_up=False, opt_in=True)
def model_blobs(cluster, conns, dep, plan) -> Verdict:
    """Every node at once; no overall deadline (hundreds of GB), but a bound on silence per blob."""
    model = dep.recipe.model

    def scan(conn) -> BlobScan:
        node = dep.inventory.node(conn.name)
        result = conn.run_script(SCRIPT, node.hf_cache, model.repo, model.revision, timeout=None,
                                 idle_timeout=1800, check=True)
        return parse_blob_scan(result.stdout)

    cells: dict[str, Cell] = {}
    try:
        scans = cluster.each(scan, conns)
    except GroupError as exc:
        scans = dict(exc.results)
        cells = {n: Cell(Status.SKIP, f"could not hash: {e}") for n, e in exc.failures.items()}
    for node, result in scans.items():
        cells[node] = judge_scan(result)
    bad = [n for n, c in cells.items() if c.status == Status.FAIL]
    fix = (f"{', '.join(bad)}: a blob's content no longer matches its name: delete that blob and its snapshot link "
           f"and download {model.repo} --revision {model.revision} again" if bad else "")
    return Verdict("model-blobs", Scope.NODE, cells, fix, 11)
