"""Issue 21, acceptance 3 (the logic): what an image copy carries, and the archive the source's filter makes.

The archive tests run the filter on a real `docker save` stream (tests/unit/samples/docker-save-3-layers.tar.gz,
Docker 20.10) and inspect the result as tar members; the same filtered archive was loaded by `docker load`
on that engine, which held the two lower layers, and gave the image's exact ID (the integration test
tests/integration/test_image_layers.py does that on the simulated nodes)."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
from pathlib import Path

import pytest

from orchestrator.docker_cli import layers as lay
from orchestrator.docker_cli.image_pipe import DirectCopy, Side, TransferFailed
from orchestrator.docker_cli.images import ImageIdentity
from orchestrator.docker_cli.layer_filter import ArchiveFilter, held_layer
from orchestrator.transport.cancel import CancelToken

SAMPLE = gzip.decompress((Path(__file__).parent / "samples" / "docker-save-3-layers.tar.gz").read_bytes())
IMAGE_ID = "sha256:fbdd2deb7c400d60583d85b3d4e5a473df791e96ad2499b44b9cdff5046af259"


def members(data: bytes) -> dict[str, bytes | None]:
    with tarfile.open(fileobj=io.BytesIO(data), mode="r:") as tar:
        return {m.name: (tar.extractfile(m).read() if m.isfile() else None) for m in tar.getmembers()}


SAVED = members(SAMPLE)
MANIFEST = json.loads(SAVED["manifest.json"])[0]
DIFF_IDS = tuple(json.loads(SAVED[MANIFEST["Config"]])["rootfs"]["diff_ids"])


def run_filter(data: bytes, chains, diffs=(), step: int = 1 << 20) -> tuple[bytes, ArchiveFilter]:
    archive = ArchiveFilter(list(chains), list(diffs))
    out = b"".join(archive.feed(data[i:i + step]) for i in range(0, len(data), step))
    return out, archive


def test_the_chain_ids_are_dockers():
    chains = lay.chain_ids(DIFF_IDS)
    assert chains[0] == DIFF_IDS[0] and len(chains) == 3
    # the v1 ID of each layer directory is a digest over its chain ID: recomputing it names every layer
    for i, path in enumerate(MANIFEST["Layers"]):
        v1_json = SAVED[path.replace("layer.tar", "json")]
        assert held_layer(v1_json, [chains[i]]) and not held_layer(v1_json, [c for c in chains if c != chains[i]])


@pytest.mark.parametrize("held", [1, 2, 3])
def test_only_the_layer_tars_the_target_lacks_are_left_in(held):
    chains = lay.chain_ids(DIFF_IDS)
    out, archive = run_filter(SAMPLE, chains[:held])
    got = members(out)
    dropped = set(MANIFEST["Layers"][:held])
    assert set(got) == set(SAVED) - dropped, "every other member is kept: dirs, VERSION, json, config, manifest"
    for name, data in got.items():
        assert data == SAVED[name], f"{name} must pass byte for byte"
    assert archive.left_out == held
    assert len(SAMPLE) - len(out) == archive.left_out_bytes == held * (512 + 2048)  # header + data per layer


def test_nothing_held_passes_the_stream_unchanged_whatever_the_chunking():
    for step in (1, 7, 511, 513, 4096):
        out, archive = run_filter(SAMPLE, [], step=step)
        assert out == SAMPLE and archive.left_out == 0


def test_chunking_does_not_change_what_is_left_out():
    chains = lay.chain_ids(DIFF_IDS)[:2]
    whole, _ = run_filter(SAMPLE, chains)
    for step in (1, 100, 512, 1000):
        assert run_filter(SAMPLE, chains, step=step)[0] == whole


def test_a_chain_of_another_image_drops_nothing():
    other = ["sha256:" + "ab" * 32, lay.chain_ids(DIFF_IDS[1:])[0]]  # the same DiffID on another base
    out, archive = run_filter(SAMPLE, other)
    assert out == SAMPLE and archive.left_out == 0


def _tar(entries: list[tuple[str, bytes]], fmt=tarfile.PAX_FORMAT) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=fmt) as tar:
        for name, data in entries:
            info = tarfile.TarInfo(name)
            info.size = len(data)
            if fmt == tarfile.PAX_FORMAT and len(name) > 60:
                info.pax_headers = {"path": name}  # a PAX header before the member, as some writers emit
            tar.addfile(info, io.BytesIO(data))
    return buffer.getvalue()


@pytest.mark.parametrize("fmt", [tarfile.PAX_FORMAT, tarfile.GNU_FORMAT], ids=["pax", "gnu"])
def test_the_oci_layout_drops_held_blobs_with_their_extended_headers(fmt):
    held, needed = "a" * 64, "b" * 64
    entries = [("blobs/sha256/" + held, b"x" * 3000), ("blobs/sha256/" + needed, b"y" * 10),
               ("index.json", b"{}"), ("manifest.json", b"[]"), ("d" * 120, b"long name kept")]
    source = _tar(entries, fmt)
    out, archive = run_filter(source, [], ["sha256:" + held])
    got = members(out)
    assert sorted(got) == sorted(name for name, _ in entries if name != "blobs/sha256/" + held)
    assert got["d" * 120] == b"long name kept" and got["blobs/sha256/" + needed] == b"y" * 10
    assert archive.left_out == 1


# ---- the plan -------------------------------------------------------------------------------------
def node(images: dict | None = None, store=lay.ImageStore.GRAPHDRIVER, python=True) -> lay.NodeLayers:
    return lay.NodeLayers(store, python, images or {})


SOURCE = ImageIdentity(IMAGE_ID, DIFF_IDS, (), ())
BASE = "sha256:" + "1" * 64


def test_nothing_moves_when_the_target_holds_the_image():
    got = lay.plan(SOURCE, 900, node(), node({IMAGE_ID: (900, DIFF_IDS)}))
    assert got.archive is lay.Archive.NOTHING and got.expected_bytes == 0


def test_the_missing_top_is_planned_with_its_size_and_the_held_blobs():
    target = node({BASE: (600, DIFF_IDS[:2]), "sha256:" + "2" * 64: (100, DIFF_IDS[:1])})
    got = lay.plan(SOURCE, 900, node(), target)
    assert got.archive is lay.Archive.LAYERS and (got.held, got.layers) == (2, 3)
    assert got.expected_bytes == 300, "the image less the largest held bottom part"
    assert list(got.held_chains) == lay.chain_ids(DIFF_IDS)[:2]
    assert json.loads(got.filter_argument()) == {"chains": lay.chain_ids(DIFF_IDS)[:2], "diffs": list(DIFF_IDS[:2])}


def test_a_diff_id_the_missing_part_repeats_is_never_left_out():
    diffs = (DIFF_IDS[0], DIFF_IDS[1], DIFF_IDS[0])  # the same layer content again on top
    got = lay.plan(ImageIdentity(IMAGE_ID, diffs, (), ()), 900, node(), node({BASE: (600, diffs[:2])}))
    assert got.archive is lay.Archive.LAYERS and got.held_diffs == (DIFF_IDS[1],)


def test_a_shared_base_under_a_different_bottom_is_not_held():
    target = node({BASE: (600, ("sha256:" + "9" * 64, DIFF_IDS[1]))})  # DiffID 1 on another base: another chain
    got = lay.plan(SOURCE, 900, node(), target)
    assert got.archive is lay.Archive.FULL and got.held == 0 and got.expected_bytes == 900


@pytest.mark.parametrize("source, target, why", [
    (node(), node({BASE: (600, DIFF_IDS[:2])}, store=lay.ImageStore.CONTAINERD), "containerd image store"),
    (node(python=False), node({BASE: (600, DIFF_IDS[:2])}), "no python3"),
])
def test_the_whole_archive_when_a_partial_one_cannot_be_made_or_loaded(source, target, why):
    got = lay.plan(SOURCE, 900, source, target)
    assert got.archive is lay.Archive.FULL and got.held == 2 and why in got.reason and got.expected_bytes == 900


def test_the_survey_output_is_parsed_and_the_containerd_store_recognised():
    info = json.loads((Path(__file__).parent / "samples" / "docker-info.json").read_text())
    lines = [json.dumps(info["DriverStatus"]), "python3", "readable overlay2 /var/lib/docker",
             f"{IMAGE_ID} 900 {json.dumps(list(DIFF_IDS))}", f"{BASE} 0 null"]
    got = lay.parse_layers(lines)
    assert got.store is lay.ImageStore.GRAPHDRIVER and got.has_python and got.streams_from_store
    assert (got.driver, got.root) == ("overlay2", "/var/lib/docker")
    assert got.images == {IMAGE_ID: (900, DIFF_IDS), BASE: (0, ())}
    assert got.chains() == set(lay.chain_ids(DIFF_IDS))
    # Docker 24+ with the containerd image store reports its snapshotter here (docs.docker.com, containerd store)
    snap = lay.parse_layers(['[["driver-type","io.containerd.snapshotter.v1"]]', "no-python3",
                             "readable overlayfs /var/lib/docker"])
    assert snap.store is lay.ImageStore.CONTAINERD and not snap.has_python and snap.images == {}
    assert not snap.streams_from_store
    user = lay.parse_layers([lines[0], "python3", "unreadable overlay2 /var/lib/docker"])  # a docker-group login
    assert not user.streams_from_store


# ---- the copy's report of the filter -------------------------------------------------------------
class _Conn:
    def __init__(self, name: str):
        self.name, self.cancel = name, CancelToken()


def test_the_filters_count_is_read_and_its_failure_blames_the_source():
    copy = DirectCopy(_Conn("spark-1"), _Conn("spark-2"), "spark-2", 100, None, 30)
    copy._line(b"\x1eSD filter left-out 2 5120")
    copy._line(b"\x1eSD status 0 0 0")
    assert copy.left_out == (2, 5120) and copy._judge(IMAGE_ID, 0) == 0
    copy._line(b"\x1eSD filter Traceback (most recent call last):")
    copy._line(b"\x1eSD filter MemoryError")
    copy._line(b"\x1eSD status 141 1 1")
    copy.load_err = ["Error processing tar file: unexpected EOF"]
    with pytest.raises(TransferFailed) as caught:
        copy._judge(IMAGE_ID, 1)
    assert caught.value.side is Side.SOURCE and caught.value.node == "spark-1"
    assert "layer filter" in str(caught.value) and "MemoryError" in str(caught.value)
