"""Community patches checked against the image they run on (field note 7), and `mounts.extra` sources.

An overlay silently stops applying when upstream renames the file, quietly deploys stale when upstream
changes it, and fails only after a 20-70 minute load when it does not compile or lacks a symbol. So, before
anything stops:
- `overlay-base` (head): each target exists in the pinned image, and its sha256 there is the recipe's
  `base_sha256` (the file the patch was written against).
- `overlay-compile` (head): each `.py` overlay compiles with the image's own Python.
- `overlay-symbols` (head): each `.so` overlay exports the `symbols:` the recipe declares.
- `overlay-parity`: each overlay's source is a file with the same bytes on every node.
- `extra-mounts`: each `mounts.extra` source exists on every node as what it is (Docker would otherwise
  create an empty directory in its place).

The three head checks share ONE throwaway container of the pinned image (`--rm --pull never --network none`,
no GPU, the head's overlay sources bind-mounted read-only), running facts/overlay_probe.py with the image's
python3. Only sources that are files on the head are mounted: a missing one is never created by Docker.
Every source is hashed on every node (`sha256sum`); the head's probe needs no other node, since
`overlay-parity` proves the bytes are the same everywhere.
"""

from __future__ import annotations

from ..config.load import Deployment
from ..facts.core import Observed
from ..facts.overlays import InImage, Source, is_python
from ..checks.verdict import Cell, Scope, Status, Verdict
from .registry import check, missing

Seen = dict[str, dict[str, Observed]]
_NOT_THERE = ("No such image", "Unable to find image", "pull access denied")


# --- the head's probe: base, compile, symbols ---------------------------------------------------------

def _probe_cell(seen: Seen, dep: Deployment) -> tuple[str, Cell | None, list[InImage]]:
    """The head, a cell when the probe cannot be judged (its reason), else the probe's answers."""
    head = dep.inventory.head
    if head not in seen:
        return head, Cell(Status.SKIP, "the head was not reached"), []
    broken = missing({head: seen[head]}, ("overlay_image",))
    if head in broken:
        observed = seen[head].get("overlay_image")
        error = (observed.error or "") if observed is not None else ""
        if any(s in error for s in _NOT_THERE):
            return head, Cell(Status.SKIP, f"image {dep.recipe.image.id} is not on the head yet (synced by `up`): "
                                           f"{error}"), []
        return head, Cell(Status.FAIL, f"running python3 in the image failed: {broken[head].value}"), []
    got = seen[head]["overlay_image"].value or []
    if len(got) != len(dep.recipe.mounts.overlays):
        return head, Cell(Status.FAIL, f"the probe answered {len(got)} of {len(dep.recipe.mounts.overlays)} "
                                       "overlays"), []
    return head, None, got


def _verdict(name: str, head: str, problems: list[str], ok: str, fix: str) -> Verdict:
    if problems:
        return Verdict(name, Scope.HEAD, {head: Cell(Status.FAIL, "; ".join(problems))},
                       f"{head}: " + "; ".join(problems) + f" ({fix})", 7)
    return Verdict(name, Scope.HEAD, {head: Cell(Status.OK, ok)}, "", 7)


def _none(name: str, seen: Seen, why: str) -> Verdict:
    return Verdict(name, Scope.HEAD, {n: Cell(Status.SKIP, why) for n in seen}, "", 7)


@check("overlay-base", ("overlay_image",), Scope.HEAD, field_note=7)
def overlay_base(seen: Seen, dep: Deployment) -> Verdict:
    overlays = dep.recipe.mounts.overlays
    if not overlays:
        return _none("overlay-base", seen, "the recipe has no mounts.overlays")
    head, cell, got = _probe_cell(seen, dep)
    if cell is not None:
        return Verdict("overlay-base", Scope.HEAD, {head: cell}, "" if cell.status is Status.SKIP else
                       f"{head}: {cell.value}", 7)
    image, problems, unpinned = dep.recipe.image.id or dep.recipe.image.ref, [], []
    for o, g in zip(overlays, got):
        if not g.exists:
            problems.append(f"{o.target} is not in image {image[:19]} (renamed or removed upstream?): overlay "
                            f"{o.source} would not apply")
        elif o.base_sha256 is None:
            unpinned.append(o.target)
        elif g.sha256 is None:
            problems.append(f"{o.target} in the image is not a readable file: its hash cannot be compared")
        elif g.sha256 != o.base_sha256:
            problems.append(f"upstream changed {o.target} since this overlay was written: port the patch again or "
                            f"update base_sha256 (image: {g.sha256}, base_sha256: {o.base_sha256})")
    ok = f"{len(overlays) - len(unpinned)} base(s) as written" + (
        f"; no base_sha256 for {', '.join(unpinned)} (exists; `spark-deploy overlay hash` prints it)" if unpinned else "")
    return _verdict("overlay-base", head, problems, ok, "`spark-deploy overlay hash RECIPE` prints the image's hashes")


@check("overlay-compile", ("overlay_image",), Scope.HEAD, field_note=7)
def overlay_compile(seen: Seen, dep: Deployment) -> Verdict:
    overlays = [(i, o) for i, o in enumerate(dep.recipe.mounts.overlays) if is_python(o)]
    if not overlays:
        return _none("overlay-compile", seen, "no .py overlay")
    head, cell, got = _probe_cell(seen, dep)
    if cell is not None:
        return Verdict("overlay-compile", Scope.HEAD, {head: cell}, "" if cell.status is Status.SKIP else
                       f"{head}: {cell.value}", 7)
    problems, unread = [], []
    for i, o in overlays:
        g = got[i]
        if g.compile is None:
            unread.append(f"{o.source}: {g.source_error or 'not a file on ' + head}")
        elif g.compile:
            problems.append(f"{o.source} does not compile with the image's Python {g.python}: {g.compile}")
    if unread and not problems:  # overlay-parity names a missing source; this check could not look
        return Verdict("overlay-compile", Scope.HEAD, {head: Cell(Status.SKIP, "not read: " + "; ".join(unread))},
                       "", 7)
    return _verdict("overlay-compile", head, problems + [f"not read: {u}" for u in unread],
                    f"{len(overlays)} .py overlay(s) compile with the image's Python {got[overlays[0][0]].python}",
                    "fix the patch for this Python, or drop it if upstream already has it")


@check("overlay-symbols", ("overlay_image",), Scope.HEAD, field_note=7)
def overlay_symbols(seen: Seen, dep: Deployment) -> Verdict:
    overlays = [(i, o) for i, o in enumerate(dep.recipe.mounts.overlays) if o.symbols]
    if not overlays:
        return _none("overlay-symbols", seen, "no overlay declares symbols")
    head, cell, got = _probe_cell(seen, dep)
    if cell is not None:
        return Verdict("overlay-symbols", Scope.HEAD, {head: cell}, "" if cell.status is Status.SKIP else
                       f"{head}: {cell.value}", 7)
    problems = []
    for i, o in overlays:
        g = got[i]
        if g.source_error:
            problems.append(f"{o.source}: not read ({g.source_error})")
        elif g.elf_error:
            problems.append(f"{o.source}: {g.elf_error}")
        elif g.missing_symbols is None:
            problems.append(f"{o.source}: not a file on {head}")
        elif g.missing_symbols:
            problems.append(f"{o.source} does not export {', '.join(g.missing_symbols)}")
    count = sum(len(o.symbols) for _, o in overlays)
    return _verdict("overlay-symbols", head, problems, f"{count} symbol(s) exported by {len(overlays)} .so overlay(s)",
                    "rebuild the .so against this image, or correct `symbols:`")


# --- every node: overlay bytes the same, extra sources present ---------------------------------------

def _short(sha: str | None) -> str:
    return (sha or "-")[:12]


@check("overlay-parity", ("mount_sources",), Scope.PARITY, field_note=7)
def overlay_parity(seen: Seen, dep: Deployment) -> Verdict:
    overlays = dep.recipe.mounts.overlays
    if not overlays:
        return Verdict("overlay-parity", Scope.PARITY, {n: Cell(Status.SKIP, "the recipe has no mounts.overlays")
                                                        for n in seen}, "", 7)
    cells = missing(seen, ("mount_sources",))
    read = {n: f["mount_sources"].value["o"] for n, f in seen.items() if n not in cells}
    bad: dict[str, list[str]] = {n: [] for n in read}
    for o in overlays:
        here = {n: got.get(o.source, Source("missing", None)) for n, got in read.items()}
        for node, src in here.items():
            if src.kind != "file":
                bad[node].append(f"{o.source} is {src.kind}" + (" (not a file)" if src.kind != "missing" else ""))
        hashes = {n: s.sha256 for n, s in here.items() if s.sha256}
        usual = _reference(hashes, dep.inventory.head)
        for node, sha in hashes.items():
            if sha != usual:
                bad[node].append(f"{o.source} differs: sha256 {sha} here, {usual} on "
                                 f"{', '.join(n for n, h in hashes.items() if h == usual)}")
    for node in read:
        cells[node] = Cell(Status.FAIL, "; ".join(bad[node])) if bad[node] else Cell(
            Status.OK, ", ".join(_short(read[node][o.source].sha256) for o in overlays))
    fix = "; ".join(f"{n}: {'; '.join(p)}" for n, p in bad.items() if p)
    return Verdict("overlay-parity", Scope.PARITY, cells, (fix + " (copy the same overlay file to every node)")
                   if fix else "", 7)


def _reference(hashes: dict[str, str], head: str) -> str | None:
    """The hash most nodes have; on a tie, the head's (the odd node out is then the other one)."""
    counts: dict[str, int] = {}
    for sha in hashes.values():
        counts[sha] = counts.get(sha, 0) + 1
    if not counts:
        return None
    top = max(counts.values())
    tied = [s for s, c in counts.items() if c == top]
    return hashes[head] if len(tied) > 1 and hashes.get(head) in tied else tied[0]


@check("extra-mounts", ("mount_sources",), Scope.NODE)
def extra_mounts(seen: Seen, dep: Deployment) -> Verdict:
    extra = dep.recipe.mounts.extra
    if not extra:
        return Verdict("extra-mounts", Scope.NODE, {n: Cell(Status.SKIP, "the recipe has no mounts.extra")
                                                    for n in seen})
    cells = missing(seen, ("mount_sources",))
    read = {n: f["mount_sources"].value["e"] for n, f in seen.items() if n not in cells}
    bad: dict[str, list[str]] = {n: [] for n in read}
    for m in extra:
        kinds = {n: got.get(m.source, Source("missing", None)).kind for n, got in read.items()}
        present = sorted({k for k in kinds.values() if k != "missing"})
        want = m.kind or (present[0] if len(present) == 1 else None)
        for node, kind in kinds.items():
            if kind == "missing":
                bad[node].append(f"{m.source} missing (docker would mount an empty directory it creates at "
                                 f"{m.target})")
            elif want is None:
                bad[node].append(f"{m.source} is a {kind} here, not the same kind on every node")
            elif kind != want:
                bad[node].append(f"{m.source} is a {kind}, the recipe needs a {want}")
    for node in read:
        cells[node] = Cell(Status.FAIL, "; ".join(bad[node])) if bad[node] else Cell(
            Status.OK, f"{len(extra)} source(s) present: " + ", ".join(f"{m.source} ({read[node][m.source].kind})"
                                                                       for m in extra))
    fix = "; ".join(f"{n}: {'; '.join(p)}" for n, p in bad.items() if p)
    return Verdict("extra-mounts", Scope.NODE, cells, (fix + " (put the file there on every node)") if fix else "")
