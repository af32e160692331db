"""Read a model snapshot's safetensors headers (and config.json) on a node, never its weights (bench's
ceiling and preflight's model-fit both size the model from them).

A safetensors file starts with an 8-byte little-endian header length n and n bytes of JSON; `dd`
reads exactly those bytes (skip_bytes/count_bytes), so a 100 GB checkpoint costs a few KB-MB over SSH.
The script is a constant; the cache, repo and revision arrive as "$1" "$2" "$3".
"""

from __future__ import annotations

import base64
import json
from dataclasses import dataclass

from .model_cache import SNAPSHOT_SH
from ..transport.node import NodeConnection

# Records, one per line, tab-separated: snap <dir> | config <base64> | header <file> <n> <base64> |
# bad <file> <why> | absent <why>.
SCRIPT = r'''cache=$1; repo=$2; rev=$3
if [ "${repo#/}" != "$repo" ]; then
  snap=$repo
  [ -d "$snap" ] || { printf 'absent\tno snapshot directory %s\n' "$snap"; exit 0; }
else
''' + SNAPSHOT_SH + r'''
fi
printf 'snap\t%s\n' "$snap"
if [ -f "$snap/config.json" ]; then printf 'config\t%s\n' "$(base64 -w0 -- "$snap/config.json")"; fi
found=0
for f in "$snap"/*.safetensors; do
  [ -e "$f" ] || continue
  found=1; name=${f##*/}
  n=$(od -An -t u8 -N8 -- "$f" | tr -d ' \n')
  if ! [[ $n =~ ^[0-9]+$ ]] || [ "$n" -lt 2 ] || [ "$n" -gt 100000000 ]; then
    printf 'bad\t%s\theader length %s\n' "$name" "$n"; continue
  fi
  printf 'header\t%s\t%s\t%s\n' "$name" "$n" \
    "$(dd if="$f" bs=65536 iflag=skip_bytes,count_bytes skip=8 count="$n" status=none | base64 -w0)"
done
[ "$found" = 1 ] || printf 'absent\tno *.safetensors in %s\n' "$snap"
exit 0'''


class HeaderError(Exception):
    """The node's snapshot could not be read as safetensors (missing, truncated, not JSON)."""


@dataclass
class Headers:
    node: str
    snapshot: str
    config: dict
    headers: dict[str, dict]
    bytes_read: int  # header bytes (8 + n per shard) plus config.json: what crossed SSH, before base64


def parse(node: str, stdout: str) -> Headers:
    """The script's records -> Headers; HeaderError (its message starts with the node) when unreadable."""
    snap, config, headers, read, bad = "", {}, {}, 0, []
    for line in stdout.splitlines():
        kind, _, rest = line.partition("\t")
        if kind == "absent":
            raise HeaderError(f"{node}: {rest}")
        if kind == "snap":
            snap = rest
        elif kind == "config":
            raw = base64.b64decode(rest)
            read += len(raw)
            try:
                config = json.loads(raw)
            except ValueError as exc:
                raise HeaderError(f"{node}: {snap}/config.json is not JSON: {exc}") from None
        elif kind == "header":
            name, n, b64 = rest.split("\t", 2)
            raw = base64.b64decode(b64)
            if len(raw) != int(n):
                raise HeaderError(f"{node}: {name}: header says {n} bytes, file holds {len(raw)}")
            read += 8 + len(raw)
            try:
                headers[name] = json.loads(raw)
            except ValueError as exc:
                raise HeaderError(f"{node}: {name}: header is not JSON: {exc}") from None
        elif kind == "bad":
            bad.append(rest.replace("\t", ": "))
        elif line.strip():
            raise HeaderError(f"{node}: unexpected line from the header reader: {line[:80]!r}")
    if bad:
        raise HeaderError(f"{node}: not safetensors: {'; '.join(bad)}")
    if not headers:
        raise HeaderError(f"{node}: no safetensors headers read from {snap or 'the snapshot'}")
    return Headers(node, snap, config, headers, read)


def read_headers(conn: NodeConnection, hf_cache: str, repo: str, revision: str, timeout: float = 60) -> Headers:
    result = conn.run_script(SCRIPT, hf_cache, repo, revision, timeout=timeout)
    if not result.ok:
        raise HeaderError(f"{conn.name}: header reader exited {result.exit_code}: {result.stderr.strip()[:300]}")
    return parse(conn.name, result.stdout)
