"""Issue 21, acceptance 3: the archive the source writes from its own layer store (docker_cli/layer_store.py),
and which writer a copy uses (layers.sender).

The store is laid out as an overlay2 engine keeps it (imagedb config, layerdb per chain ID with cache-id and
tar-split.json.gz, overlay2/<cache-id>/diff); each layer's tar-split here is made from a tar written by
Python's tarfile, so the reassembly can be held to those exact bytes (and their sha256 to the DiffID).
That the format matches the engine's own was checked against this machine's dockerd 20.10 (every layer
of its images reassembled to its DiffID; an archive of a three-layer image loaded to the same ID) and is
held by tests/integration/test_image_layers.py and test_image_sync.py, whose copies use this writer."""

from __future__ import annotations

import base64
import gzip
import hashlib
import io
import json
import tarfile
from pathlib import Path

import pytest

from orchestrator.docker_cli import layers as lay
from orchestrator.docker_cli.images import ImageIdentity
from orchestrator.docker_cli.layer_store import Store, write_archive


def _layer_tar(files: dict[str, bytes]) -> bytes:
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for name, data in files.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
        empty = tarfile.TarInfo("etc/.wh.removed")  # a whiteout: no content, as overlay2 layers have
        tar.addfile(empty)
    return buffer.getvalue()


def _tar_split(raw: bytes) -> bytes:
    """tar-split's JSON lines for `raw`: headers and padding as segments (type 2), contents as files (type 1)."""
    lines, pos, offset = [], 0, 0

    def segment(data: bytes) -> None:
        nonlocal pos
        lines.append({"type": 2, "payload": base64.b64encode(data).decode(), "position": pos})
        pos += 1

    with tarfile.open(fileobj=io.BytesIO(raw), mode="r:") as tar:
        for member in tar.getmembers():
            segment(raw[offset:member.offset_data])
            lines.append({"type": 1, "name": member.name, "size": member.size, "payload": None, "position": pos})
            pos += 1
            offset = member.offset_data + member.size
    segment(raw[offset:])
    return gzip.compress(b"".join(json.dumps(line).encode() + b"\n" for line in lines))


def make_store(root: Path, layers: list[dict[str, bytes]]) -> tuple[Store, str, list[str], list[bytes]]:
    diffs, tars = [], []
    for files in layers:
        raw = _layer_tar(files)
        tars.append(raw)
        diffs.append("sha256:" + hashlib.sha256(raw).hexdigest())
    chains = lay.chain_ids(diffs)
    for i, (chain, files, raw) in enumerate(zip(chains, layers, tars)):
        meta = root / "image/overlay2/layerdb/sha256" / chain.split(":")[1]
        meta.mkdir(parents=True)
        (meta / "cache-id").write_text(f"cache{i}")
        (meta / "tar-split.json.gz").write_bytes(_tar_split(raw))
        for name, data in files.items():
            path = root / "overlay2" / f"cache{i}" / "diff" / name
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(data)
    config = json.dumps({"architecture": "arm64", "os": "linux", "config": {"Cmd": ["/a <b> & c"]},
                         "rootfs": {"type": "layers", "diff_ids": diffs}}).encode()
    image_id = "sha256:" + hashlib.sha256(config).hexdigest()
    content = root / "image/overlay2/imagedb/content/sha256"
    content.mkdir(parents=True)
    (content / image_id.split(":")[1]).write_bytes(config)
    return Store(str(root)), image_id, chains, tars


LAYERS = [{"bin/tool": b"x" * 5000, "etc/conf": b"one\n"}, {"etc/conf": b"two\n"}, {"srv/weights.bin": bytes(range(256)) * 40}]


def archive(store: Store, image_id: str, skip=()) -> tuple[dict[str, bytes], tuple[int, int]]:
    out = io.BytesIO()
    said = write_archive(store, image_id, set(skip), out.write)
    with tarfile.open(fileobj=io.BytesIO(out.getvalue()), mode="r:") as tar:
        return {m.name: tar.extractfile(m).read() for m in tar.getmembers()}, said


def test_the_whole_archive_holds_the_config_every_exact_layer_tar_and_the_manifest(tmp_path):
    store, image_id, chains, tars = make_store(tmp_path, LAYERS)
    got, said = archive(store, image_id)
    names = [c.split(":")[1] + "/layer.tar" for c in chains]
    config_name = image_id.split(":")[1] + ".json"
    assert set(got) == {config_name, "manifest.json", *names}
    assert json.loads(got["manifest.json"]) == [{"Config": config_name, "RepoTags": None, "Layers": names}]
    assert "sha256:" + hashlib.sha256(got[config_name]).hexdigest() == image_id
    for name, raw in zip(names, tars):
        assert got[name] == raw, "each layer tar is the original byte for byte (its sha256 is the DiffID)"
    assert said == (0, 0)


def test_skipped_layers_are_left_out_and_still_listed(tmp_path):
    store, image_id, chains, tars = make_store(tmp_path, LAYERS)
    got, said = archive(store, image_id, chains[:2])
    assert [n for n in got if n.endswith("layer.tar")] == [chains[2].split(":")[1] + "/layer.tar"]
    assert len(json.loads(got["manifest.json"])[0]["Layers"]) == 3, "docker load finds the held ones by chain ID"
    assert said == (2, len(tars[0]) + len(tars[1]))


def test_a_file_changed_under_the_layer_fails_instead_of_sending_a_wrong_tar(tmp_path):
    store, image_id, _, _ = make_store(tmp_path, LAYERS)
    (tmp_path / "overlay2/cache2/diff/srv/weights.bin").write_bytes(b"short")
    with pytest.raises(OSError, match="shorter than"):
        archive(store, image_id)


def test_a_config_that_does_not_hash_to_the_id_is_refused(tmp_path):
    store, image_id, _, _ = make_store(tmp_path, LAYERS)
    path = tmp_path / "image/overlay2/imagedb/content/sha256" / image_id.split(":")[1]
    path.write_bytes(path.read_bytes().replace(b"arm64", b"amd64"))
    with pytest.raises(ValueError, match="does not hash"):
        archive(store, image_id)


def _node(readable=True, python=True, driver="overlay2", store=lay.ImageStore.GRAPHDRIVER) -> lay.NodeLayers:
    return lay.NodeLayers(store, python, {}, driver, "/var/lib/docker", readable)


SOURCE = ImageIdentity("sha256:" + "f" * 64, ("sha256:" + "1" * 64, "sha256:" + "2" * 64), (), ())
HELD = lay.NodeLayers(lay.ImageStore.GRAPHDRIVER, True, {"sha256:" + "e" * 64: (10, SOURCE.diff_ids[:1])})


@pytest.mark.parametrize("source, target, producer, skipped", [
    (_node(), HELD, lay.Producer.STORE, 1),  # readable store: the source's own writer, held layer skipped
    (_node(), _node(), lay.Producer.STORE, 0),  # nothing held: the same writer, every layer
    (_node(readable=False), HELD, lay.Producer.FILTERED_SAVE, None),  # a docker-group login: save, filtered
    (_node(readable=False), _node(), lay.Producer.SAVE, None),
    (_node(driver="btrfs"), HELD, lay.Producer.FILTERED_SAVE, None),  # another driver keeps layers elsewhere
])
def test_the_writer_follows_what_the_source_can_read(source, target, producer, skipped):
    plan = lay.plan(SOURCE, 20, source, target)
    send = lay.sender(plan, source, SOURCE.id)
    assert send.producer is producer
    if skipped is not None:
        assert len(json.loads(send.argument)["skip"]) == skipped
    assert lay.sender(plan, source, SOURCE.id, read_store=False).producer is not lay.Producer.STORE
