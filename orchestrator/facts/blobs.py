"""The blob hash scan (field note 11): every blob of the model snapshot hashed and set beside its name.

Not gathered with the other facts: it reads everything (167 GB takes minutes per node), so the opt-in
`preflight --verify-blobs` (preflight's checks_blobs.py) runs it alone, on all nodes at once, and judges
what parse_blob_scan returns.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from ..checks.blob_hash import BLOB_DIGEST_SH
from ..checks.model_cache import SNAPSHOT_SH

# "$1" = the node's HF cache, "$2" = the repo id, "$3" = the revision; the hash rule is checks/blob_hash.py's.
# One record per file, as it ends.
SCRIPT = BLOB_DIGEST_SH + r'''
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
