"""Model faults on one simulated node: real changes to the fake model in its HF cache (no switch in
product code), for the preflight model checks. `model-reset` puts back what `sim up` installed."""

from __future__ import annotations

import hashlib
import re

from . import fake_model, provision
from .state import NODE_HF_CACHE, NodeInfo, SimError, SimInputError

MODEL_ROOT = f"{NODE_HF_CACHE}/hub/{fake_model.CACHE_DIR_NAME}"
DEFAULT_SHARD = f"model-00002-of-{fake_model.SHARDS:05d}.safetensors"
_FILE = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")  # a file at the top of the snapshot


def _file_opt(kind: str, opts: dict) -> str:
    unknown = set(opts) - {"file"}
    name = str(opts.get("file", DEFAULT_SHARD))
    if unknown or not _FILE.fullmatch(name):
        raise SimInputError(f"fault {kind} takes [file=NAME] (a file of the snapshot, default {DEFAULT_SHARD})")
    return name


def _snapshot(cluster, node: NodeInfo) -> str:
    """The snapshot directory refs/main points at on that node."""
    res = cluster.exec(node.index, ["cat", "--", f"{MODEL_ROOT}/refs/main"], check=False)
    rev = res.stdout.strip()
    if res.code != 0 or not re.fullmatch(r"[0-9a-f]{40}", rev):
        raise SimError(f"{node.name}: no fake model in {MODEL_ROOT} (refs/main: {(res.stderr or rev).strip()}); "
                       "fault model-reset installs it")
    return f"{MODEL_ROOT}/snapshots/{rev}"


def remove_shard(cluster, node: NodeInfo, opts: dict) -> str:
    name = _file_opt("model-remove-shard", opts)
    link = f"{_snapshot(cluster, node)}/{name}"
    res = cluster.exec(node.index, ["rm", "--", link], check=False)
    if res.code != 0:
        raise SimError(f"{node.name}: removing {link} failed: {res.stderr.strip()}")
    return f"{node.name}: {name} removed from the snapshot (its blob stays)"


# Copy the blob, change its last byte (+1 mod 256), store the copy under its own sha256 and point the
# snapshot's symlink at it: same name and size, different content, different blob name.
_CHANGE = r'''set -e
link=$1; blobs=$2
src=$(readlink -f -- "$link")
tmp=$(mktemp "$blobs/.sim-change.XXXXXX")
cp -- "$src" "$tmp"
size=$(stat -c %s -- "$tmp")
last=$(tail -c 1 -- "$tmp" | od -An -tu1 | tr -d ' ')
printf "\\$(printf %03o $(( (${last:-0} + 1) % 256 )))" | dd of="$tmp" bs=1 seek=$((size - 1)) conv=notrunc status=none
sha=$(sha256sum -- "$tmp" | cut -d' ' -f1)
mv -f -- "$tmp" "$blobs/$sha"
ln -sfn -- "../../blobs/$sha" "$link"
printf '%s %s\n' "${src##*/}" "$sha"'''


def change_blob(cluster, node: NodeInfo, opts: dict) -> str:
    name = _file_opt("model-change-blob", opts)
    link = f"{_snapshot(cluster, node)}/{name}"
    res = cluster.exec(node.index, ["bash", "-c", _CHANGE, "bash", link, f"{MODEL_ROOT}/blobs"], check=False)
    if res.code != 0:
        raise SimError(f"{node.name}: changing the blob of {name} failed: {res.stderr.strip()}")
    old, new = res.stdout.split()
    return f"{node.name}: {name} now points at blob {new} (was {old}): same size, one byte differs"


def incomplete(cluster, node: NodeInfo, opts: dict) -> str:
    unknown = set(opts) - {"size"}
    size = str(opts.get("size", "4096"))
    if unknown or not size.isdigit() or int(size) > 64 << 20:
        raise SimInputError("fault model-incomplete takes [size=BYTES] (at most 64 MiB, default 4096)")
    sha = hashlib.sha256(f"sim partial download on {node.name}".encode()).hexdigest()
    path = f"{MODEL_ROOT}/blobs/{sha}.incomplete"
    cluster.exec(node.index, ["bash", "-c", 'head -c "$2" /dev/zero > "$1"', "bash", path, size])
    return f"{node.name}: partial download blobs/{sha}.incomplete ({size} B)"


def reset(cluster, node: NodeInfo, opts: dict) -> str:
    if opts:
        raise SimInputError(f"fault model-reset takes no options, got {sorted(opts)}")
    cluster.exec(node.index, ["rm", "-rf", "--", MODEL_ROOT])
    data, meta = fake_model.hf_cache_tar()
    if not cluster.container(node.index).put_archive(NODE_HF_CACHE, data):
        raise SimError(f"{node.name}: reinstalling the fake model into {NODE_HF_CACHE} failed")
    provision.own_dirs(cluster.container(node.index), [NODE_HF_CACHE])  # the login user downloaded it
    return f"{node.name}: fake model reinstalled (revision {meta['revision']})"

