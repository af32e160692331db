"""The overlays' facts (field note 7): what each overlay meets in the pinned image, and every mount source's
bytes and kind on every node. preflight's checks_overlays.py judges them; `overlay hash` (overlay_hash.py)
and `upgrade` run the same probe.

The head's facts come from ONE throwaway container of the pinned image (`--rm --pull never --network none`,
no GPU, the head's overlay sources bind-mounted read-only), running overlay_probe.py with the image's
python3. Only sources that are files on the head are mounted: a missing one is never created by Docker.
Every source is hashed on every node (`sha256sum`).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..config.recipe import Overlay
from .core import FactInput, fact

PROGRAM = (Path(__file__).parent / "overlay_probe.py").read_text()
MOUNTED = "/run/sd-overlay"  # where the probe's container sees the head's overlay sources (source i at /i)


def is_python(o: Overlay) -> bool:
    return o.target.endswith(".py")


def probe_spec(overlays: list[Overlay], mounted: bool = True) -> str:
    """overlay_probe.py's argv[1] (mounted False: hashes only, as `overlay hash` asks)."""
    return json.dumps([{"target": o.target, "source": f"{MOUNTED}/{i}" if mounted else None,
                        "compile": is_python(o), "symbols": list(o.symbols)} for i, o in enumerate(overlays)])


# "$1" image, "$2" the probe's spec, then each overlay's source on the head: mounted read-only when it is a
# file there (a `--mount` of a missing path fails; never `-v`, which would create a directory).
PROBE_SH = r'''[ $# -gt 0 ] || { echo '@none'; exit 0; }
img=$1; spec=$2; shift 2
mounts=(); i=0
for src; do
  [ -f "$src" ] && mounts+=(--mount "type=bind,src=$src,dst=''' + MOUNTED + r'''/$i,readonly")
  i=$((i + 1))
done
echo '@fresh'
exec docker run --rm --pull never --network none "${mounts[@]}" --entrypoint python3 "$img" \
  -I -S -c ''' + shlex.quote(PROGRAM) + ''' "$spec"'''


def _probe_args(given: FactInput) -> list[str]:
    overlays = given.dep.recipe.mounts.overlays
    if given.node.name != given.dep.inventory.head or not overlays:
        return []
    return [given.plan.image_id, probe_spec(overlays), *[o.source for o in overlays]]


@dataclass(frozen=True)
class InImage:
    """What one overlay meets in the image (overlay_probe.py's line)."""

    target: str
    exists: bool
    sha256: str | None
    python: str
    compile: str | None  # None: not asked or no source; "": compiled; else the error
    missing_symbols: tuple[str, ...] | None
    elf_error: str | None
    source_error: str | None


def parse_probe(stdout: str) -> list[InImage] | None:
    """The probe's lines -> one InImage per overlay, in the recipe's order (None: not the head / no overlays)."""
    head, _, body = stdout.partition("\n")
    if head.strip() == "@none":
        return None
    if head.strip() != "@fresh":
        raise ValueError(f"unexpected header {head[:80]!r}")
    found = []
    for line in body.splitlines():
        if not line.strip():
            continue
        d = json.loads(line)
        syms = d.get("missing_symbols")
        found.append(InImage(d["target"], bool(d["exists"]), d.get("sha256"), d.get("python", "?"), d.get("compile"),
                             tuple(syms) if syms is not None else None, d.get("elf_error"), d.get("source_error")))
    return found


fact("overlay_image", PROBE_SH, args=_probe_args)(parse_probe)


# Every node: each overlay source hashed (`o`), each extra source's kind (`e`); tab-separated lines
# "MODE KIND SHA PATH" (KIND: file, directory, other, missing; SHA "-" unless an overlay file).
SOURCES_SH = r'''while [ $# -ge 2 ]; do
  mode=$1; p=$2; shift 2; sha=-
  if [ -f "$p" ]; then kind=file
    if [ "$mode" = o ]; then sha=$(sha256sum -- "$p" 2>/dev/null) && sha=${sha%% *} || { kind=unreadable; sha=-; }; fi
  elif [ -d "$p" ]; then kind=directory
  elif [ -e "$p" ] || [ -L "$p" ]; then kind=other
  else kind=missing; fi
  printf '%s\t%s\t%s\t%s\n' "$mode" "$kind" "$sha" "$p"
done'''


@dataclass(frozen=True)
class Source:
    kind: str  # file, directory, other, unreadable, missing
    sha256: str | None


def _sources_args(given: FactInput) -> list[str]:
    mounts = given.dep.recipe.mounts
    return [a for o in mounts.overlays for a in ("o", o.source)] + [a for e in mounts.extra for a in ("e", e.source)]


@fact("mount_sources", SOURCES_SH, args=_sources_args)
def parse_mount_sources(stdout: str) -> dict[str, dict[str, Source]]:
    """-> {"o": {overlay source: Source}, "e": {extra source: Source}}."""
    out: dict[str, dict[str, Source]] = {"o": {}, "e": {}}
    for line in stdout.splitlines():
        if not line:
            continue
        mode, kind, sha, path = line.split("\t", 3)
        if mode not in out or kind not in ("file", "directory", "other", "unreadable", "missing"):
            raise ValueError(f"unexpected line {line[:80]!r}")
        out[mode][path] = Source(kind, None if sha == "-" else sha)
    return out

