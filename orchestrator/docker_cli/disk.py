"""A node's Docker disk usage as a fact: one `docker system df` and a pure parser of what it prints.

`prune` measures what it freed as `before.total - after.total` from two of these. Docker prints sizes
through go-units `HumanSize` (decimal units, 4 significant digits, e.g. "116.1MB", "2.346MB", "0B"), so
each figure is exact to about 0.05 % of itself, not to the byte. Type names are kept as Docker prints
them ("Images", "Containers", "Local Volumes", "Build Cache"), including any a later Docker adds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from ..transport.node import NodeConnection, NodeError

DISK_COMMAND = ["docker", "system", "df", "--format", "{{.Type}}\t{{.TotalCount}}\t{{.Size}}\t{{.Reclaimable}}"]
DISK_TIMEOUT = 120.0  # df walks every container's writable layer: slow on a busy node, never minutes

# go-units decimapAbbrs: powers of 1000 (HumanSize never prints KiB-style binary units).
_UNITS = {"b": 0, "kb": 1, "mb": 2, "gb": 3, "tb": 4, "pb": 5, "eb": 6, "zb": 7, "yb": 8}
# "%.4g" + unit, optionally followed by the " (NN%)" share that the Reclaimable column adds.
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE][+-]?\d+)?)\s*([A-Za-z]+)\s*(?:\(\s*\d+(?:\.\d+)?\s*%\s*\))?\s*$")


def parse_human_size(text: str) -> int:
    """Bytes from go-units HumanSize output ("0B", "1.5kB", "12.3MB", "1.2GB (50%)"); ValueError otherwise."""
    match = _SIZE.match(text)
    if not match or match.group(2).lower() not in _UNITS:
        raise ValueError(f"not a Docker size: {text!r}")
    return round(float(match.group(1)) * 1000 ** _UNITS[match.group(2).lower()])


@dataclass(frozen=True)
class DiskUsage:
    """Bytes per `docker system df` type; `reclaimable` and `counts` are the other two columns."""

    by_type: dict[str, int]
    reclaimable: dict[str, int] = field(default_factory=dict)
    counts: dict[str, int] = field(default_factory=dict)

    @property
    def total(self) -> int:
        return sum(self.by_type.values())

    @property
    def total_reclaimable(self) -> int:
        return sum(self.reclaimable.values())


def parse_disk_usage(stdout: str) -> DiskUsage:
    """Parse DISK_COMMAND's output (TYPE<TAB>COUNT<TAB>SIZE<TAB>RECLAIMABLE per line); ValueError naming the line."""
    by_type: dict[str, int] = {}
    reclaimable: dict[str, int] = {}
    counts: dict[str, int] = {}
    for number, line in enumerate(stdout.splitlines(), 1):
        if not line.strip():
            continue
        fields = line.split("\t")
        if len(fields) != 4:
            raise ValueError(f"docker system df line {number}: expected 4 tab-separated fields, got {line!r}")
        kind, count, size, free = (f.strip() for f in fields)
        if not kind or kind in by_type:
            raise ValueError(f"docker system df line {number}: {'empty' if not kind else 'repeated'} type in {line!r}")
        if not count.isdigit():
            raise ValueError(f"docker system df line {number}: count {count!r} is not a number")
        try:
            by_type[kind], reclaimable[kind] = parse_human_size(size), parse_human_size(free)
        except ValueError as exc:
            raise ValueError(f"docker system df line {number}: {exc}") from None
        counts[kind] = int(count)
    if not by_type:
        raise ValueError("docker system df printed nothing")
    return DiskUsage(by_type, reclaimable, counts)


def disk_usage(conn: NodeConnection) -> DiskUsage:
    """The node's `docker system df`; NodeError naming the node if docker fails or prints something else."""
    result = conn.run(DISK_COMMAND, timeout=DISK_TIMEOUT, check=True)
    try:
        return parse_disk_usage(result.stdout)
    except ValueError as exc:
        raise NodeError(conn.name, f"unexpected `docker system df` output: {exc}") from None
