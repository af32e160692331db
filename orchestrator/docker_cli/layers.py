"""What an image copy must carry: the layers the target lacks, the whole archive, or nothing.

A layer is held by its chain ID (the layer together with every layer under it): an engine that holds
chain ID N of the source's stack holds every one below it, so what is missing is always a top part of the
stack. The target's chain IDs are read from every image it has (`docker image inspect`, RootFS); an
engine on the containerd image store keeps layers its own way and `docker load` there needs every blob in
the archive, so it always gets the whole one.
"""

from __future__ import annotations

import enum
import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from ..transport.node import NodeConnection, NodeError
from .images import ImageIdentity, docker_reason

FILTER_SOURCE = (Path(__file__).parent / "layer_filter.py").read_text()
STORE_SOURCE = (Path(__file__).parent / "layer_store.py").read_text()

# One round trip: the engine's storage driver status; whether python3 is there (the source runs the filter
# or the store reader with it); the driver, root dir and whether this login can read the layer store; then
# one line per image: ID, size, layer DiffIDs.
_SURVEY = r"""docker info --format '{{json .DriverStatus}}' || exit 1
command -v python3 >/dev/null 2>&1 && echo python3 || echo no-python3
set -- $(docker info --format '{{.Driver}} {{.DockerRootDir}}') || exit 1
if [ -r "$2/image/$1/layerdb/sha256" ] && [ -x "$2/$1" ]; then echo "readable $1 $2"; else echo "unreadable $1 $2"; fi
docker image ls --all --quiet --no-trunc | sort -u | xargs -r docker image inspect \
  --format '{{.Id}} {{.Size}} {{json .RootFS.Layers}}' || exit 1"""


class Archive(enum.Enum):
    NOTHING = "nothing"  # the target holds the image
    LAYERS = "missing layers"  # only the layers the target lacks, with the manifest and config
    FULL = "whole image"


class ImageStore(enum.Enum):
    GRAPHDRIVER = "graphdriver"  # overlay2 and the other classic drivers: a partial archive loads
    CONTAINERD = "containerd"  # the containerd image store (snapshotter): it needs every blob


def chain_ids(diff_ids: tuple[str, ...] | list[str]) -> list[str]:
    """The chain ID of each layer: the first is its DiffID, then sha256("<chain below> <DiffID>")."""
    chains: list[str] = []
    for diff in diff_ids:
        chains.append(diff if not chains else "sha256:" + hashlib.sha256(f"{chains[-1]} {diff}".encode()).hexdigest())
    return chains


@dataclass(frozen=True)
class NodeLayers:
    """What one engine holds: its images (ID -> size, DiffIDs) and how it stores them."""

    store: ImageStore
    has_python: bool
    images: dict[str, tuple[int, tuple[str, ...]]] = field(default_factory=dict)
    driver: str = ""
    root: str = ""  # DockerRootDir
    store_readable: bool = False  # this login can read the layer store (root, or a readable root dir)

    @property
    def streams_from_store(self) -> bool:
        """The source can send from its layer store itself (layer_store.py) instead of `docker save`."""
        return (self.has_python and self.store_readable and self.driver == "overlay2"
                and self.store is ImageStore.GRAPHDRIVER)

    def store_argument(self, image_id: str, skip: tuple[str, ...]) -> str:
        return json.dumps({"root": self.root, "driver": self.driver, "image": image_id, "skip": list(skip)})

    def chains(self) -> set[str]:
        return {c for _, diffs in self.images.values() for c in chain_ids(diffs)}


def read_layers(conn: NodeConnection) -> NodeLayers:
    result = conn.run_script(_SURVEY, timeout=60)
    lines = result.stdout.splitlines()
    if not result.ok or len(lines) < 3:
        raise NodeError(conn.name, "cannot list its image layers: "
                                   + docker_reason(result.stderr.splitlines(), result.exit_code))
    return parse_layers(lines)


def parse_layers(lines: list[str]) -> NodeLayers:
    """The survey's output: the driver status line, the python3 line, `readable|unreadable DRIVER ROOT`,
    then `ID SIZE [DiffIDs]` per image."""
    status = json.loads(lines[0] or "null") or []
    containerd = any("containerd" in str(value) for pair in status for value in pair)
    access, driver, root = (lines[2].split(" ", 2) + ["", ""])[:3]
    images = {}
    for line in lines[3:]:
        image_id, size, layers = (line.split(" ", 2) + ["", ""])[:3]
        if image_id:
            images[image_id] = (int(size or 0), tuple(json.loads(layers or "null") or ()))
    return NodeLayers(ImageStore.CONTAINERD if containerd else ImageStore.GRAPHDRIVER, lines[1] == "python3", images,
                      driver, root, access == "readable")


@dataclass(frozen=True)
class LayerPlan:
    """The archive to send, the chain IDs and DiffIDs the filter leaves out, and an estimate of its size."""

    archive: Archive
    held: int  # how many of the image's layers (from the bottom) the target holds
    layers: int
    expected_bytes: int
    reason: str
    held_chains: tuple[str, ...] = ()
    held_diffs: tuple[str, ...] = ()

    def filter_argument(self) -> str:
        return json.dumps({"chains": list(self.held_chains), "diffs": list(self.held_diffs)})


def plan(source: ImageIdentity, size: int, source_node: NodeLayers, target: NodeLayers) -> LayerPlan:
    """Decide what moves. The estimate: the image's size less the largest target image that is a bottom
    part of it (docker reports content sizes, close to the tar sizes that move)."""
    diffs, layers = source.diff_ids, len(source.diff_ids)
    if source.id in target.images:
        return LayerPlan(Archive.NOTHING, layers, layers, 0, "the target already holds the image")
    held_set = target.chains()
    chains = chain_ids(diffs)
    held = next((i for i, c in enumerate(chains) if c not in held_set), layers)
    if held == 0:
        return LayerPlan(Archive.FULL, 0, layers, size, "the target holds none of its layers")
    if target.store is ImageStore.CONTAINERD:
        return LayerPlan(Archive.FULL, held, layers, size,
                         "the target's engine uses the containerd image store, which loads only whole archives")
    if not source_node.has_python:
        return LayerPlan(Archive.FULL, held, layers, size,
                         "the source has no python3 to leave the held layers out of the stream")
    below = max((s for s, d in target.images.values() if d and len(d) <= held and tuple(diffs[:len(d)]) == d),
                default=0)
    needed = set(diffs[held:])
    return LayerPlan(Archive.LAYERS, held, layers, max(size - below, 0),
                     f"the target holds {held} of its {layers} layers",
                     tuple(chains[:held]), tuple(d for d in diffs[:held] if d not in needed))


class Producer(enum.Enum):
    """What writes the archive on the source."""

    STORE = "store"  # layer_store.py reads the engine's layer store: streams from the first byte
    FILTERED_SAVE = "filter"  # docker save | layer_filter.py: the held layers cut out on the way
    SAVE = "save"  # docker save as it is


@dataclass(frozen=True)
class Send:
    producer: Producer
    program: str = ""  # the python3 program the source runs (empty for plain docker save)
    argument: str = ""


def sender(layers: LayerPlan, source: NodeLayers, image_id: str, read_store: bool = True) -> Send:
    """The source's own store reader when it can read the store (no staging copy, only the missing layers
    read); else `docker save`, filtered when only some layers are to move."""
    partial = layers.archive is Archive.LAYERS
    if read_store and source.streams_from_store:
        return Send(Producer.STORE, STORE_SOURCE, source.store_argument(image_id, layers.held_chains if partial else ()))
    if partial:
        return Send(Producer.FILTERED_SAVE, FILTER_SOURCE, layers.filter_argument())
    return Send(Producer.SAVE)
