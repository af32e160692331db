"""`preflight --verify-blobs`: hash every blob of the model snapshot on every node and compare each
hash with the blob's name (field note 11).

The default model checks compare blob NAMES across nodes: cheap, and enough when the cache was written by
a downloader that names blobs by their hash. A blob whose bytes rotted or were overwritten in place keeps
its name; only reading it finds that. This reads everything (167 GB takes minutes per node), so it runs
only when asked, on all nodes at once, and reports the hashing throughput so the next run can be planned.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..checks.blob_hash import BLOB_DIGEST_SH
from ..checks.model_cache import SNAPSHOT_SH
from ..transport.group import GroupError
from ..checks.verdict import Cell, Scope, Status, Verdict
from .registry import active_check

# "$1" = the node's HF cache, "$2" = the repo id, "$3" = the revision; the hash rule is checks/blob_hash.py's.
# One record per file, as it ends.
_SCRIPT = BLOB_DIGEST_SH + r'''
cache=$1; repo=$2; rev=$3
if [ "${repo#/}" != "$repo" ]; then printf 'plain\t%s\n' "$repo"; exit 0; fi
''' + SNAPSHOT_SH + r'''
printf 'start\t%s\n' "$(date +%s.%N)"
find "$snap" -mindepth 1 -type l -printf '%P\t%l\n' | sort | while IFS=$'\t' read -r name target; do
  blob=${target##*/}; f=$snap/$name
  if [ ! -e "$f" ]; then printf 'file\t%s\t%s\tmissing\t0\n' "$name" "$blob"; continue; fi
  size=$(stat -L -c %s -- "$f") || exit
  sum=$(blob_digest "$f" "$blob") || exit
  printf 'file\t%s\t%s\t%s\t%s\n' "$name" "$blob" "$sum" "$size"
done
printf 'end\t%s\n' "$(date +%s.%N)"'''


@dataclass(frozen=True)
class Hashed:
    name: str  # path in the snapshot
    blob: str  # the blob's file name: what the content must hash to
    digest: str  # what it hashes to ("missing": the blob is gone; "unnamed": the name is not a hash)
    size: int

    @property
    def matches(self) -> bool:
        return self.digest == self.blob


@dataclass
class BlobScan:
    files: list[Hashed] = field(default_factory=list)
    seconds: float | None = None
    absent: str | None = None  # why nothing could be hashed
    plain: bool = False  # a model directory, not an HF cache: no blob names to check against

    @property
    def bytes(self) -> int:
        return sum(f.size for f in self.files)


def parse_blob_scan(stdout: str) -> BlobScan:
    """The records of the script above -> a BlobScan. Refuses a record it does not know."""
    scan, start = BlobScan(), None
    for line in stdout.splitlines():
        kind, _, rest = line.partition("\t")
        parts = rest.split("\t")
        if kind == "plain":
            scan.plain = True
        elif kind == "absent":
            scan.absent = rest
        elif kind == "start":
            start = float(rest)
        elif kind == "end":
            if start is None:
                raise ValueError("an end record without a start")
            scan.seconds = float(rest) - start
        elif kind == "file" and len(parts) == 4:
            scan.files.append(Hashed(parts[0], parts[1], parts[2], int(parts[3])))
        elif line:
            raise ValueError(f"unexpected line {line!r}")
    if not (scan.plain or scan.absent) and scan.seconds is None:
        raise ValueError("the scan did not finish (no end record)")
    return scan


def throughput(scan: BlobScan) -> str:
    mb = scan.bytes / 1e6
    rate = f", {mb / scan.seconds:.0f} MB/s" if scan.seconds else ""
    return f"{len(scan.files)} blobs, {mb:.1f} MB hashed in {scan.seconds or 0:.1f} s{rate}"


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
        result = conn.run_script(_SCRIPT, node.hf_cache, model.repo, model.revision, timeout=None,
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
