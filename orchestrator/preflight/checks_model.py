"""The model checks: revision parity across nodes without reading the weights (field note 11), over the
model snapshot fact (facts/model.py).

A shard the index names but the snapshot lacks, or a `.incomplete` blob left by an interrupted download,
is otherwise only found when loading fails, 20-70 minutes in.
"""

from __future__ import annotations

import re

from ..checks.verdict import Cell, Scope, Status, Verdict
from ..config.load import Deployment
from ..facts.core import Observed
from ..facts.model import FACT, INDEX, SnapFile, Snapshot
from .registry import check, missing

_COMMIT = re.compile(r"[0-9a-f]{40}")

Seen = dict[str, dict[str, Observed]]


def _download_cmd(dep: Deployment) -> str:
    model = dep.recipe.model
    if model.repo.startswith("/"):
        return f"copy the model directory {model.repo} to the same path there"
    # THE command that fixes it: downloads once (where no node holds it) and copies only the blobs a node
    # lacks or holds damaged, over the fabric; `up --sync-model` runs the same inside up
    pin = "" if _COMMIT.fullmatch(model.revision) else f" --revision {model.revision}"
    return f"spark-deploy model pull {dep.recipe_path}{pin} -i {dep.inventory_path} (or up --sync-model)"


def _download_fix(dep: Deployment) -> str:
    if dep.recipe.model.repo.startswith("/"):
        return _download_cmd(dep)
    return f"copy the model there: {_download_cmd(dep)}"


def _ranked(seen: Seen, dep: Deployment) -> Seen:
    """The nodes in rank order (facts arrive in completion order): values and fixes read the same every run."""
    rank = {n.name: i for i, n in enumerate(dep.inventory.ranked)}
    return dict(sorted(seen.items(), key=lambda item: (rank.get(item[0], len(rank)), item[0])))


def _split(seen: Seen) -> tuple[dict[str, Cell], dict[str, Snapshot], list[str]]:
    """Skip cells for nodes whose fact is missing, fail cells for nodes without the snapshot, and the
    snapshots of the others."""
    cells = missing(seen, (FACT,))
    present: dict[str, Snapshot] = {}
    absent: list[str] = []
    for node, facts in seen.items():
        if node in cells:
            continue
        snap: Snapshot = facts[FACT].value
        if snap.absent is not None:
            cells[node] = Cell(Status.FAIL, f"no snapshot: {snap.absent}")
            absent.append(node)
        else:
            present[node] = snap
    return cells, present, absent


def _short(value: str) -> str:
    return value[:16] if len(value) > 16 else value


def _shown(f: SnapFile | None, full: bool = False) -> str:
    if f is None:
        return "missing"
    blob = (f.blob if full else _short(f.blob)) or "regular file"
    return f"blob {blob} ({'blob missing' if f.size is None else f'{f.size} B'})"


def _odd_ones(values: dict[str, object]) -> set[str]:
    """The nodes whose value is not the clear majority among those that have one; a node without a
    value (None) is always odd once anyone has one. On a tie nobody can be trusted: all are odd."""
    if len(set(values.values())) <= 1:
        return set()
    counts: dict[object, int] = {}
    for v in values.values():
        if v is not None:
            counts[v] = counts.get(v, 0) + 1
    top = sorted(counts.values(), reverse=True)
    winner = next(v for v, c in counts.items() if c == top[0]) if len(top) == 1 or top[0] > top[1] else None
    return {n for n, v in values.items() if v is None or v != winner}


def _compare(present: dict[str, Snapshot]) -> tuple[dict[str, list[str]], list[str]]:
    """Per node, its differences from the others (short values); and the same with full values, for the fix."""
    problems: dict[str, list[str]] = {n: [] for n in present}
    full: list[str] = []
    commits = {n: s.commit for n, s in present.items()}
    for node in sorted(_odd_ones(commits), key=list(present).index):
        others = ", ".join(f"{m}: {_short(c)}" for m, c in commits.items() if c != commits[node])
        problems[node].append(f"revision {_short(commits[node])} vs {others}")
    if len(set(commits.values())) > 1:
        full.append("revision " + ", ".join(f"{n}: {c}" for n, c in commits.items()))
    names = sorted({name for s in present.values() for name in s.files})
    for name in names:
        values = {n: s.files.get(name) for n, s in present.items()}
        for node in sorted(_odd_ones(values), key=list(present).index):
            others = ", ".join(f"{m}: {_shown(v)}" for m, v in values.items() if v != values[node])
            problems[node].append(f"{name}: {_shown(values[node])} vs {others}")
        if len(set(values.values())) > 1:
            full.append(f"{name}: " + ", ".join(f"{n}: {_shown(v, True)}" for n, v in values.items()))
        for node, v in values.items():
            if v is not None and v.size is None and node not in _odd_ones(values):
                problems[node].append(f"{name}: blob {_short(v.blob)} missing from blobs/")
                full.append(f"{name}: {node}: blob {v.blob} missing from blobs/")
    return problems, full


def _running_fix(seen: Seen) -> str:
    """The advice when a `model pull` copies into a node's cache now: the snapshot is mid-copy (blobs still
    arriving, links made at its end), so wait for it; "" when none runs. Never to delete its files."""
    snaps = {node: facts[FACT].value for node, facts in seen.items() if FACT in facts}
    running = [p.describe(node) for node, snap in snaps.items() if isinstance(snap, Snapshot) for p in snap.running]
    if not running:
        return ""
    return (f"a running `model pull` is copying the model ({'; '.join(running)}): wait for it to finish, then "
            "run this again (its .incomplete files are the copy in progress)")


def _listed(items: list[str], limit: int = 3) -> str:
    return "; ".join(items[:limit]) + (f" (+{len(items) - limit} more)" if len(items) > limit else "")


@check("model-files", (FACT,), Scope.PARITY, field_note=11)
def model_files(seen: Seen, dep: Deployment) -> Verdict:
    seen = _ranked(seen, dep)
    cells, present, absent = _split(seen)
    problems, full = _compare(present)
    for node, snap in present.items():
        if problems[node]:
            cells[node] = Cell(Status.FAIL, _listed(problems[node]))
        else:
            total = sum(f.size or 0 for f in snap.files.values())
            cells[node] = Cell(Status.OK, f"{_short(snap.commit)}: {len(snap.files)} files, {total} B")
    fixes = []
    if absent:
        fixes.append(f"no snapshot of {dep.recipe.model.repo}@{dep.recipe.model.revision} on "
                     f"{', '.join(absent)}: {_download_fix(dep)}")
    if full:
        bad = [n for n in present if problems[n]]
        fixes.append(f"the model snapshot differs on {', '.join(bad)} (a different revision or a corrupted "
                     f"download; field note 11): {_listed(full, 5)}; delete the odd files from the snapshot of the "
                     f"node whose copy is wrong, then run: {_download_cmd(dep)}")
    return Verdict("model-files", Scope.PARITY, cells, _running_fix(seen) or " | ".join(fixes), 11)


@check("model-shards", (FACT,), Scope.NODE, field_note=11)
def model_shards(seen: Seen, dep: Deployment) -> Verdict:
    seen = _ranked(seen, dep)
    cells, present, absent = _split(seen)
    bad: list[str] = []
    for node, snap in present.items():
        if snap.index_error:
            cells[node] = Cell(Status.FAIL, snap.index_error)
            bad.append(node)
            continue
        if snap.shards is None:
            weights = [n for n in snap.files if n.endswith(".safetensors")]
            cells[node] = (Cell(Status.OK, f"no {INDEX}; {len(weights)} .safetensors file(s)") if weights
                           else Cell(Status.SKIP, f"no {INDEX} and no .safetensors file in the snapshot"))
            continue
        lost = [s for s in snap.shards if s not in snap.files]
        hollow = [s for s in snap.shards if s in snap.files and snap.files[s].size is None]
        if lost or hollow:
            text = [f"missing: {', '.join(lost)}"] if lost else []
            text += [f"blob missing: {', '.join(hollow)}"] if hollow else []
            cells[node] = Cell(Status.FAIL, f"{'; '.join(text)} (the index names {len(snap.shards)})")
            bad.append(node)
        else:
            cells[node] = Cell(Status.OK, f"all {len(snap.shards)} shards the index names are present")
    fixes = []
    if absent:
        fixes.append(f"no snapshot on {', '.join(absent)}: {_download_fix(dep)}")
    if bad:
        fixes.append(f"shards the index names are missing on {', '.join(bad)}: "
                     f"{_download_cmd(dep)} (fetches only what is missing)")
    return Verdict("model-shards", Scope.NODE, cells, _running_fix(seen) or " | ".join(fixes), 11)


@check("model-incomplete", (FACT,), Scope.NODE, field_note=11)
def model_incomplete(seen: Seen, dep: Deployment) -> Verdict:
    seen = _ranked(seen, dep)
    cells, present, absent = _split(seen)
    bad: list[str] = []
    for node, facts in seen.items():
        if node in cells and node not in absent:
            continue
        snap: Snapshot = facts[FACT].value
        prefix = cells[node].value + "; " if node in absent else ""
        if snap.running:  # its .incomplete files are the copy's work in progress
            cells[node] = Cell(Status.FAIL, f"{prefix}a model pull is copying into this cache now ("
                               f"{'; '.join(p.describe(node) for p in snap.running)})")
        elif snap.incomplete:
            shown = ", ".join(f"blobs/{n} ({s} B)" for n, s in snap.incomplete.items())
            cells[node] = Cell(Status.FAIL, f"{prefix}partial download: {shown}")
            bad.append(node)
        elif node in present:
            cells[node] = Cell(Status.OK, "no .incomplete blob")
    fixes = [fix for fix in [_running_fix(seen)] if fix]
    absent = [n for n in absent if not seen[n][FACT].value.running]
    if absent:
        fixes.append(f"no snapshot on {', '.join(absent)}: {_download_fix(dep)}")
    if bad:
        fixes.append(f"an interrupted download left partial blobs on {', '.join(bad)}: rerun "
                     f"{_download_cmd(dep)} (it resumes them), or delete "
                     f"the .incomplete files under blobs/")
    return Verdict("model-incomplete", Scope.NODE, cells, " | ".join(fixes), 11)
