"""The model snapshot fact: each file of repo@revision in a node's HF cache, by blob name and size (field note 11).

A Hugging Face cache names every blob by its content hash (sha256 for LFS files), and a snapshot is a
directory of symlinks to blobs. Comparing each file's blob name and size across nodes therefore
compares content, at the cost of a `find`, not of hashing hundreds of GB. The judges are
preflight's checks_model.py; maintenance records the same fact in its baseline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

from ..checks.model_cache import RESOLVE_SH
from ..checks.pull_mark import PULL_MARK_SH, RunningPull, parse_mark
from .core import fact

FACT = "model_snapshot"
INDEX = "model.safetensors.index.json"

# "$1" = the node's HF cache, "$2" = the repo id (or an absolute directory), "$3" = the revision.
# One tab-separated record per line; the index, if any, comes last (everything after its `index` line).
_SCRIPT = PULL_MARK_SH + r'''
cache=$1; repo=$2; rev=$3
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
if [ -n "$root" ] && [ -d "$root" ]; then pull_marks "$root"; fi
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
    pulls: tuple[RunningPull, ...] = ()  # the marks of `model pull` copies into this cache, live or dead

    @property
    def running(self) -> list[RunningPull]:
        return [p for p in self.pulls if p.live]


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
    pulls: list[RunningPull] = []
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
        elif kind == "pull" and (mark := parse_mark(parts)) is not None:
            pulls.append(mark)
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
    return Snapshot(root, commit, absent, files if absent is None else {}, incomplete, shards, index_error,
                    tuple(pulls))
