"""Copy one snapshot's missing or damaged blobs from a source node to a target node, over the fabric.

The controller only starts the target's script (model/scripts.COPY_SH) and reads its records: the bytes go
`ssh source dd skip=N blob | blob_keep >> blob.incomplete` on the target, node to node (no rsync needed), so the
machine running spark-deploy is not in the data path. Progress (bytes, rate, ETA) comes from the sizes of
the `.incomplete` files the target reports twice a second.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..transport.cancel import Cancelled
from ..transport.node import NodeConnection, NodeError
from .scripts import COPY_SH, SURVEY_SH, BlobState, Held, Listing, copy_args, parse_survey

SURVEY_IDLE = 1800.0  # hashing a 5 GB shard prints nothing for a while


class CopyFailed(NodeError):
    """A blob copy failed; `node` names the side to blame ("source → target" for the link)."""


@dataclass(frozen=True)
class Route:
    source: str  # node name
    target: str
    source_blobs: str  # the source's blobs dir
    address: str  # user@fabric_ip of the source, as the target reaches it
    port: int


@dataclass
class Progress:
    """What one target has received in this run; `on_change(target, done, total, rate)` is told."""

    target: str
    total: int
    offsets: dict[str, int]  # blob -> bytes it had before this run
    on_change: Callable[[str, int, int, float], None] | None = None
    at: dict[str, int] = field(default_factory=dict)
    started: float = field(default_factory=time.monotonic)

    @property
    def done(self) -> int:
        return sum(max(0, n - self.offsets.get(b, 0)) for b, n in self.at.items())

    def restart(self, blob: str) -> None:
        """The blob is fetched again from byte 0: what it had before this run no longer counts as held."""
        self.total += self.offsets.pop(blob, 0)
        self.at[blob] = 0

    def saw(self, blob: str, size: int) -> None:
        self.at[blob] = max(self.at.get(blob, 0), size)
        if self.on_change:
            elapsed = max(time.monotonic() - self.started, 1e-6)
            self.on_change(self.target, self.done, self.total, self.done / elapsed)


@dataclass
class CopyResult:
    target: str
    sent: dict[str, int] = field(default_factory=dict)  # blob -> bytes that crossed the link in this run
    verified: list[str] = field(default_factory=list)  # blobs that arrived and hashed right
    linked: int = 0  # snapshot links made or mended: a repaired link moves no byte but is work done

    @property
    def bytes(self) -> int:
        return sum(self.sent.values())


def survey(conn: NodeConnection, hf_cache: str, repo: str, listing: Listing) -> dict[str, BlobState]:
    """What the target holds of each blob, every present one hashed (the --verify-blobs hash)."""
    result = conn.run_script(SURVEY_SH, hf_cache, repo, *listing.blobs(), timeout=None,
                             idle_timeout=SURVEY_IDLE, check=True)
    return parse_survey(result.stdout)


def to_fetch(listing: Listing, held: dict[str, BlobState]) -> list[str]:
    """Pure: the blobs a target lacks or holds damaged (a partial one resumes)."""
    return [b for b in listing.blobs() if held.get(b, BlobState(Held.MISSING)).held is not Held.HAVE]


def copy_blobs(conn: NodeConnection, route: Route, hf_cache: str, repo: str, commit: str, listing: Listing,
               held: dict[str, BlobState], *, streams: int = 4, ref: str = "",
               on_progress: Callable[[str, int, int, float], None] | None = None,
               on_note: Callable[[str, str], None] | None = None) -> CopyResult:
    """Fetch what the target lacks, verify each blob, link the snapshot. Raises CopyFailed naming the node
    (or both, for the link) and the blob; Cancelled when the operation was cancelled (what arrived stays).
    A resumed blob that fails its hash is fetched once more from byte 0 (the target's own partial bytes may
    be the damaged ones); `on_note(text, node)` is told."""
    fetch = to_fetch(listing, held)
    sizes = listing.blobs()
    offsets = {b: held[b].offset for b in fetch if b in held and held[b].held is Held.PARTIAL}
    progress = Progress(route.target, sum(sizes[b] - offsets.get(b, 0) for b in fetch), offsets, on_progress)
    result, fails, bad, other = CopyResult(route.target), [], [], []

    def on_line(line: str) -> None:
        kind, _, rest = line.partition("\t")
        parts = rest.split("\t")
        if kind == "at" and len(parts) == 2 and parts[1].isdigit():
            progress.saw(parts[0], int(parts[1]))
        elif kind == "got" and len(parts) == 2:
            result.sent[parts[0]] = result.sent.get(parts[0], 0) + int(parts[1])
        elif kind == "refetch" and len(parts) == 2:
            progress.restart(parts[0])
            if on_note:
                on_note(f"blob {parts[0][:16]} resumed from {route.target}'s partial file hashed to "
                        f"{parts[1][:16]}: fetching it again from byte 0", route.target)
        elif kind == "ok":
            result.verified.append(parts[0])
            progress.saw(parts[0], sizes.get(parts[0], 0))
        elif kind == "bad" and len(parts) == 2:
            bad.append((parts[0], parts[1]))
        elif kind == "fail" and len(parts) == 3:
            fails.append(parts)
        elif kind == "relinked":
            result.linked += 1
        elif kind != "linked" and line.strip():
            other.append(line)

    argv = ["bash", "-c", COPY_SH, "bash", hf_cache, repo, commit, route.source_blobs, route.address,
            str(route.port), str(max(1, streams)), ref, *copy_args(listing, fetch)]
    code = conn.stream(argv, on_line)
    if code == -1:
        raise Cancelled(f"copy to {route.target} interrupted: {result.bytes} bytes had arrived (kept as .incomplete)")
    if code == 0 and not fails and not bad:
        return result
    raise _failure(route, fails, bad, other, code)


def _failure(route: Route, fails: list[list[str]], bad: list[tuple[str, str]], other: list[str], code: int) -> CopyFailed:
    src, dst = route.source, route.target
    if fails:
        blob, side, why = fails[0]
        what = f"blob {blob[:16]}" if blob != "-" else "the copy"
        if side == "reach":
            return CopyFailed(f"{src} → {dst}", f"{dst} cannot SSH to {src} at {route.address.split('@')[-1]} "
                              f"(port {route.port}) over the fabric: {why}. Each node needs an SSH key the others "
                              "accept and their host keys in its known_hosts: `spark-deploy setup --node-keys` "
                              "installs both")
        if side == "link":
            return CopyFailed(f"{src} → {dst}", f"{what}: the fabric link from {src} to {dst} broke or stalled "
                              f"({why}); what arrived is kept as .incomplete and a rerun resumes it")
        if side == "source":
            return CopyFailed(src, f"{what}: cannot read it on {src} for {dst}: {why}")
        if blob == "-":
            return CopyFailed(dst, why)
        return CopyFailed(dst, f"{what}: cannot write it on {dst}: {why}; the partial file stays "
                          ".incomplete (never linked) and a rerun resumes it")
    if bad:
        blob, digest = bad[0]
        return CopyFailed(f"{src} → {dst}", f"blob {blob[:16]} arrived on {dst} hashing to {digest[:16]}: its "
                          f"bytes on {src} are damaged or changed in transit; it was discarded, not linked "
                          f"(run preflight --verify-blobs on {src})")
    tail = other[-1] if other else "no reason printed"
    return CopyFailed(dst, f"the blob copy from {src} exited {code}: {tail}")
