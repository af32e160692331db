"""`model pull`'s pure parts: what a target must fetch, the records of the node scripts (SURVEY_SH run in
real bash on a real HF cache layout), the refusals before any connection, and the failure words."""

from __future__ import annotations

import pytest

from orchestrator.model.copy import Route, _failure, to_fetch
from orchestrator.model.pull import PullRefused, wanted_revision
from orchestrator.model.scripts import (LIST_SH, SURVEY_SH, BlobState, Held, Listing, SnapFile, copy_args,
                                        parse_listing, parse_survey)
from orchestrator.sim import fake_model

from fakes import deployment, run_bash

META = fake_model.model_metadata()
REPO = fake_model.REPO_ID


def test_the_source_listing_names_every_snapshot_file_with_its_blob_and_size(hf_cache):
    listing = parse_listing(run_bash(LIST_SH, str(hf_cache.root), REPO, META["revision"]))
    assert {f.name: (f.blob, f.size) for f in listing.files} == {n: (f["blob"], f["size"]) for n, f in META["files"].items()}
    absent = parse_listing(run_bash(LIST_SH, str(hf_cache.root), REPO, "0" * 40))
    assert absent.absent and absent.absent.startswith("no snapshot directory")


def test_the_survey_hashes_what_is_there_and_says_what_is_missing_damaged_or_partial(hf_cache):
    blobs = hf_cache.blobs
    shard1, shard3, config = (META["files"][n]["blob"] for n in
                              ("model-00001-of-00003.safetensors", "model-00003-of-00003.safetensors", "config.json"))
    (blobs / shard1).unlink()
    (blobs / f"{shard1}.incomplete").write_bytes(b"x" * 1000)
    data = bytearray((blobs / shard3).read_bytes())
    data[100] ^= 1
    (blobs / shard3).write_bytes(bytes(data))  # same name and size, other bytes
    (blobs / config).unlink()
    listing = parse_listing(run_bash(LIST_SH, str(hf_cache.root), REPO, META["revision"]))
    held = parse_survey(run_bash(SURVEY_SH, str(hf_cache.root), REPO, *listing.blobs()))
    assert held[shard1] == BlobState(Held.PARTIAL, offset=1000)
    assert held[shard3].held is Held.DAMAGED and held[shard3].digest != shard3
    assert held[config] == BlobState(Held.MISSING)
    assert sorted(to_fetch(listing, held)) == sorted([shard1, shard3, config])
    assert sum(1 for s in held.values() if s.held is Held.HAVE) == 2


def test_copy_args_fetch_first_then_every_link():
    listing = Listing([SnapFile("a.json", "1" * 40, 5), SnapFile("sub/b.safetensors", "2" * 64, 9)])
    assert copy_args(listing, ["2" * 64]) == ["F", "2" * 64, "9", "L", "a.json", "1" * 40,
                                              "L", "sub/b.safetensors", "2" * 64]


def test_a_branch_is_refused_without_revision_and_a_local_path_always(tmp_path):
    dep = deployment(tmp_path)  # the sim recipe: revision main
    with pytest.raises(PullRefused, match=r"'main' is a branch or tag.*--revision main"):
        wanted_revision(dep.recipe, None)
    assert wanted_revision(dep.recipe, "main") == "main"
    pinned = deployment(tmp_path, recipe=lambda r: r["model"].update(revision=META["revision"]))
    assert wanted_revision(pinned.recipe, None) == META["revision"]
    local = deployment(tmp_path, recipe=lambda r: r["model"].update(repo="/models/x"))
    with pytest.raises(PullRefused, match="local path"):
        wanted_revision(local.recipe, "main")


def test_failures_name_the_side_to_blame():
    route = Route("spark-1", "spark-2", "/c/blobs", "spark@192.168.100.1", 22)
    reach = _failure(route, [["-", "reach", "Permission denied (publickey)."]], [], [], 1)
    assert str(reach).startswith("spark-1 → spark-2: spark-2 cannot SSH to spark-1 at 192.168.100.1 (port 22)")
    link = _failure(route, [["ab" * 32, "link", "Timeout, server not responding."]], [], [], 1)
    assert "the fabric link from spark-1 to spark-2 broke or stalled" in str(link) and str(link).startswith("spark-1 → spark-2")
    full = _failure(route, [["ab" * 32, "target", "dd: error writing 'x': No space left on device"]], [], [], 1)
    assert str(full).startswith("spark-2: blob abababababababab: cannot write it on spark-2: dd: error writing")
    assert ".incomplete" in str(full)
    bad = _failure(route, [], [("ab" * 32, "cd" * 32)], [], 1)
    assert "damaged or changed in transit" in str(bad) and "discarded, not linked" in str(bad)
