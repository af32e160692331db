"""Model facts and checks: revision parity across nodes without reading the weights (field note 11).

A Hugging Face cache names every blob by its content hash (sha256 for LFS files), and a snapshot is a
directory of symlinks to blobs. Comparing each file's blob name and size across nodes therefore
compares content, at the cost of a `find`, not of hashing hundreds of GB. A shard the index names but
the snapshot lacks, or a `.incomplete` blob left by an interrupted download, is otherwise only found
when loading fails, 20-70 minutes in.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

from ..checks.model_cache import RESOLVE_SH
from ..config.load import Deployment
from ..facts.core import Observed, fact
from ..checks.verdict import Cell, Scope, Status, Verdict
from .registry import check, missing

_COMMIT = re.compile(r"[0-9a-f]{40}")

Seen = dict[str, dict[str, Observed]]

FACT = "model_snapshot"
INDEX = "model.safetensors.index.json"

# "$1" = the node's HF cache, "$2" = the repo id (or an absolute directory), "$3" = the revision.
# One tab-separated record per line; the index, if any, comes last (everything after its `index` line).
_SCRIPT = r'''cache=$1; repo=$2; rev=$3
if [ "${repo#/}" != "$repo" ]; then
  root=; snap=$repo; commit="local:$repo"; printf 'local\t%s\n' "$repo"
else
  snap=
''' + RESOLVE_SH + r'''
  printf 'root\t%s\n' "$root"
  [ -n "$commit" ] && snap="$root/snapshots/$commit"
fi
if [ ! -d "$root" ] && [ -n "$root" ]; then printf 'absent\tno %s\n' "$root"
elif [ -z "$snap" ]; then printf 'absent\tno refs/%s in %s\n' "$rev" "$root"
elif [ ! -d "$snap" ]; then printf 'absent\tno snapshot directory %s\n' "$snap"
else
  printf 'commit\t%s\n' "$commit"
  find "$snap" -mindepth 1 ! -type d -printf 'link\t%P\t%l\n' || exit
  find -L "$snap" -mindepth 1 ! -type d -printf 'size\t%P\t%s\t%y\n' || exit
fi
if [ -n "$root" ] && [ -d "$root/blobs" ]; then
  find "$root/blobs" -maxdepth 1 -name '*.incomplete' -printf 'incomplete\t%f\t%s\n' || exit
fi
if [ -n "$snap" ] && [ -e "$snap/model.safetensors.index.json" ]; then
  printf 'index\n'; cat -- "$snap/model.safetensors.index.json" 2>/dev/null || printf '\n'
fi
exit 0'''


@dataclass(frozen=True)
class SnapFile:
    blob: str  # the symlink target's basename; "" for a regular file (a plain model directory)
    size: int | None  # None: the symlink's blob is missing from blobs/


@dataclass(frozen=True)
class Snapshot:
    """One node's view of model.repo@revision in its HF cache."""

    root: str
    commit: str = ""
    absent: str | None = None  # why there is no snapshot
    files: dict[str, SnapFile] = field(default_factory=dict)
    incomplete: dict[str, int] = field(default_factory=dict)  # blob file name -> size
    shards: tuple[str, ...] | None = None  # what the index's weight_map names; None: no index
    index_error: str | None = None


def _fact_args(given) -> list[str]:
    model = given.dep.recipe.model
    return [given.node.hf_cache, model.repo, model.revision]


@fact(FACT, _SCRIPT, args=_fact_args)
def parse_snapshot(stdout: str) -> Snapshot:
    """The records of the script above -> a Snapshot. Refuses a record it does not know."""
    head, sep, index_text = stdout.partition("\nindex\n")
    if not sep and stdout.startswith("index\n"):
        head, sep, index_text = "", "index", stdout[len("index\n"):]
    root, commit, absent = "", "", None
    links: dict[str, str] = {}
    sizes: dict[str, int | None] = {}
    incomplete: dict[str, int] = {}
    for line in head.splitlines():
        if not line:
            continue
        kind, _, rest = line.partition("\t")
        parts = rest.split("\t")
        if kind in ("root", "local"):
            root = rest
        elif kind == "commit":
            commit = rest.strip()
        elif kind == "absent":
            absent = rest
        elif kind == "link" and len(parts) == 2:
            links[parts[0]] = parts[1]
        elif kind == "size" and len(parts) == 3:
            # under `find -L` a symlink still of type l is one whose target is missing
            sizes[parts[0]] = None if parts[2] == "l" else int(parts[1])
        elif kind == "incomplete" and len(parts) == 2:
            incomplete[parts[0]] = int(parts[1])
        else:
            raise ValueError(f"unknown record {line[:80]!r}")
    if absent is None and not commit:
        raise ValueError("neither a commit nor a reason for its absence")
    files = {name: SnapFile(links.get(name, "").rsplit("/", 1)[-1], sizes.get(name))
             for name in sorted(set(links) | set(sizes))}
    shards, index_error = None, None
    if sep:
        try:
            weight_map = json.loads(index_text)["weight_map"]
            shards = tuple(sorted(set(weight_map.values())))
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            index_error = f"{INDEX} unreadable ({type(exc).__name__}: {str(exc)[:120]})"
    return Snapshot(root, commit, absent, files if absent is None else {}, incomplete, shards, index_error)


# ---- judging --------------------------------------------------------------------------------------


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
    return Verdict("model-files", Scope.PARITY, cells, " | ".join(fixes), 11)


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
    return Verdict("model-shards", Scope.NODE, cells, " | ".join(fixes), 11)


@check("model-incomplete", (FACT,), Scope.NODE, field_note=11)
def model_incomplete(seen: Seen, dep: Deployment) -> Verdict:
    seen = _ranked(seen, dep)
    cells, present, absent = _split(seen)
    bad: list[str] = []
    for node, facts in seen.items():
        if node in cells and node not in absent:
            continue
        snap: Snapshot = facts[FACT].value
        if snap.incomplete:
            shown = ", ".join(f"blobs/{n} ({s} B)" for n, s in snap.incomplete.items())
            prefix = cells[node].value + "; " if node in absent else ""
            cells[node] = Cell(Status.FAIL, f"{prefix}partial download: {shown}")
            bad.append(node)
        elif node in present:
            cells[node] = Cell(Status.OK, "no .incomplete blob")
    fixes = []
    if absent:
        fixes.append(f"no snapshot on {', '.join(absent)}: {_download_fix(dep)}")
    if bad:
        fixes.append(f"an interrupted download left partial blobs on {', '.join(bad)}: rerun "
                     f"{_download_cmd(dep)} (it resumes them), or delete "
                     f"the .incomplete files under blobs/")
    return Verdict("model-incomplete", Scope.NODE, cells, " | ".join(fixes), 11)
