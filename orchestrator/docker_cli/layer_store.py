"""Write an image as a `docker load` archive straight from the engine's layer store, streaming.

Runs on the source node (`python3 -c SOURCE PLAN`, stdlib only) in place of `docker save` when the login
user can read the store (root, or a readable /var/lib/docker) and the driver is overlay2. Docker 20.10's
`docker save` first copies every layer into a temporary directory and only then starts to send, so a copy
costs a save plus a load one after the other; this sends from the first byte, and sends only the layers
the plan does not skip. Each layer's tar is put back together the way the engine itself does it for
`docker save` (moby layer.assembleTarTo): the tar-split metadata the engine kept when the layer was
made holds every header and padding byte, and the file contents come from the layer's diff directory, so
the tar is byte for byte the one whose sha256 is the layer's DiffID. `docker load` checks that DiffID for
each layer it takes, and the copy checks the image ID after.

The archive: the image's config as `<ID>.json`, `manifest.json` listing every layer, and the tars of the
layers not skipped (`docker load` takes a skipped one, held by chain ID, from its own store).
"""

from __future__ import annotations

import base64
import gzip
import hashlib
import json
import os
import sys
import tarfile

CHUNK = 1 << 20


def chain_ids(diff_ids: list[str]) -> list[str]:
    chains: list[str] = []
    for diff in diff_ids:
        chains.append(diff if not chains else "sha256:" + hashlib.sha256(f"{chains[-1]} {diff}".encode()).hexdigest())
    return chains


def _entries(meta: str):
    with gzip.open(os.path.join(meta, "tar-split.json.gz"), "rb") as handle:
        for line in handle:
            if line.strip():
                yield json.loads(line)


def _name(entry: dict) -> str:
    if entry.get("name_raw"):
        return os.fsdecode(base64.b64decode(entry["name_raw"]))
    return entry.get("name") or ""


def layer_size(meta: str) -> int:
    """The length of the layer's tar: its raw segments plus its files' sizes (no file is read)."""
    total = 0
    for entry in _entries(meta):
        if entry.get("type") == 2:
            total += len(base64.b64decode(entry.get("payload") or ""))
        else:
            total += int(entry.get("size") or 0)
    return total


def layer_tar(meta: str, diff_dir: str, write) -> int:
    """The layer's tar, put back together from its tar-split metadata and its diff directory."""
    sent = 0
    for entry in _entries(meta):
        if entry.get("type") == 2:
            data = base64.b64decode(entry.get("payload") or "")
            write(data)
            sent += len(data)
            continue
        size = int(entry.get("size") or 0)
        if not size:
            continue
        path = os.path.join(diff_dir, _name(entry).lstrip("/"))
        with open(path, "rb") as handle:
            left = size
            while left:
                data = handle.read(min(left, CHUNK))
                if not data:
                    raise OSError(f"{path} is shorter than the {size} bytes the layer recorded")
                write(data)
                left -= len(data)
        sent += size
    return sent


class Store:
    """Where an overlay2 engine keeps an image: its config, and per chain ID the layer's metadata."""

    def __init__(self, root: str, driver: str = "overlay2"):
        self.root, self.driver = root, driver
        self.images = os.path.join(root, "image", driver, "imagedb", "content", "sha256")
        self.layers = os.path.join(root, "image", driver, "layerdb", "sha256")

    def config(self, image_id: str) -> bytes:
        with open(os.path.join(self.images, image_id.split(":", 1)[-1]), "rb") as handle:
            return handle.read()

    def layer(self, chain: str) -> tuple[str, str]:
        meta = os.path.join(self.layers, chain.split(":", 1)[-1])
        with open(os.path.join(meta, "cache-id")) as handle:
            cache_id = handle.read().strip()
        return meta, os.path.join(self.root, self.driver, cache_id, "diff")


def _header(name: str, size: int) -> bytes:
    info = tarfile.TarInfo(name)
    info.size, info.mode, info.mtime = size, 0o644, 0
    return info.tobuf(format=tarfile.PAX_FORMAT)  # PAX: a layer may exceed ustar's 8 GB


def _padding(size: int) -> bytes:
    return b"\0" * (-size % tarfile.BLOCKSIZE)


def write_archive(store: Store, image_id: str, skip: set[str], write) -> tuple[int, int]:
    """The archive for `image_id` without the layers in `skip` (chain IDs); (layers left out, their bytes)."""
    config = store.config(image_id)
    if "sha256:" + hashlib.sha256(config).hexdigest() != image_id:
        raise ValueError(f"the engine's config of {image_id[:19]} does not hash to its ID")
    chains = chain_ids(json.loads(config)["rootfs"]["diff_ids"])
    config_name = image_id.split(":", 1)[-1] + ".json"
    names = [c.split(":", 1)[-1] + "/layer.tar" for c in chains]
    write(_header(config_name, len(config)) + config + _padding(len(config)))
    left_out = [0, 0]
    for chain, name in zip(chains, names):
        meta, diff_dir = store.layer(chain)
        size = layer_size(meta)
        if chain in skip:
            left_out[0] += 1
            left_out[1] += size
            continue
        write(_header(name, size))
        if layer_tar(meta, diff_dir, write) != size:
            raise OSError(f"the layer {chain[:19]} changed while it was read")
        write(_padding(size))
    manifest = json.dumps([{"Config": config_name, "RepoTags": None, "Layers": names}]).encode()
    write(_header("manifest.json", len(manifest)) + manifest + _padding(len(manifest)))
    write(b"\0" * (2 * tarfile.BLOCKSIZE))
    return left_out[0], left_out[1]


def main() -> int:
    """argv[-1]: {"root": DockerRootDir, "driver": "overlay2", "image": ID, "skip": [chain IDs]}; the archive
    on stdout; one last line on stderr: `left-out LAYERS BYTES`."""
    plan = json.loads(sys.argv[-1])  # after a marker word (sdstore) that names the process in `ps`
    out = sys.stdout.buffer

    def write(data: bytes) -> None:
        out.write(data)

    try:
        left = write_archive(Store(plan["root"], plan.get("driver") or "overlay2"), plan["image"],
                             set(plan.get("skip") or ()), write)
        out.flush()
    except BrokenPipeError:
        return 141  # the reader went away first: its failure is the one to report
    except (OSError, ValueError, KeyError) as exc:
        sys.stderr.write(f"cannot read the image from the engine's layer store: {exc}\n")
        return 1
    sys.stderr.write(f"left-out {left[0]} {left[1]}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
