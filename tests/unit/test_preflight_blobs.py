"""--verify-blobs: the node script run for real (bash, sha256sum, sha1sum) on a fake HF cache written here,
its parser, and the judge; and that the check is opt-in."""

from __future__ import annotations

import pytest
from fakes import run_bash

from orchestrator import preflight as registry
from orchestrator.facts.blobs import SCRIPT, parse_blob_scan
from orchestrator.preflight.checks_blobs import judge_scan
from orchestrator.checks.verdict import Status
from orchestrator.sim import fake_model


def scan_here(cache, repo=fake_model.REPO_ID, rev="main") -> str:
    return run_bash(SCRIPT, str(cache), repo, rev)


def test_a_healthy_cache_hashes_to_its_names(hf_cache):
    root, meta = hf_cache.root, hf_cache.meta
    scan = parse_blob_scan(scan_here(root))
    assert {f.name: f.blob for f in scan.files} == {n: f["blob"] for n, f in meta["files"].items()}
    assert all(f.matches for f in scan.files) and scan.bytes == meta["total_bytes"]
    assert {len(f.blob) for f in scan.files} == {40, 64}  # git blob ids and LFS sha256 both checked
    cell = judge_scan(scan)
    assert cell.status == Status.OK and cell.value.startswith("every blob hashes to its name: 5 blobs, ")


def test_bytes_changed_in_place_and_a_missing_blob_fail(hf_cache):
    root, meta = hf_cache.root, hf_cache.meta
    shard = "model-00002-of-00003.safetensors"
    blobs = hf_cache.blobs
    path = blobs / meta["files"][shard]["blob"]
    data = bytearray(path.read_bytes())
    data[5000] ^= 0xFF
    path.write_bytes(bytes(data))
    (blobs / meta["files"]["config.json"]["blob"]).unlink()
    scan = parse_blob_scan(scan_here(root))
    bad = {f.name: f.digest for f in scan.files if not f.matches}
    assert set(bad) == {shard, "config.json"} and bad["config.json"] == "missing"
    cell = judge_scan(scan)
    assert cell.status == Status.FAIL
    assert f"{shard}: blob {meta['files'][shard]['blob'][:16]} hashes to " in cell.value
    assert "config.json: blob" in cell.value and "is missing" in cell.value


def test_no_snapshot_and_a_plain_directory(hf_cache):
    root = hf_cache.root
    absent = parse_blob_scan(scan_here(root, rev="v9"))
    assert judge_scan(absent).status == Status.FAIL and "no refs/v9" in judge_scan(absent).value
    plain = parse_blob_scan(scan_here(root, repo="/models/local"))
    assert judge_scan(plain).status == Status.SKIP


def test_the_parser_refuses_what_it_does_not_know():
    with pytest.raises(ValueError, match="unexpected line"):
        parse_blob_scan("start\t1.0\nbogus\tx\nend\t2.0\n")
    with pytest.raises(ValueError, match="did not finish"):
        parse_blob_scan("start\t1.0\nfile\ta\tb\tb\t3\n")


def test_model_blobs_runs_only_when_asked():
    assert "model-blobs" not in {s.name for s in registry.select()}
    assert "model-blobs" not in {s.name for s in registry.select(up_subset=True)}
    assert "model-blobs" in {s.name for s in registry.select(include=["model-blobs"])}
    assert [s.name for s in registry.select(only=["model-blobs"])] == ["model-blobs"]
