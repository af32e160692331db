"""The download program `model pull` runs in the pinned image, run here by this venv's python against the Hub
stand-in (sim/hub.py): the REAL huggingface_hub client over real HTTP, its cache layout, its resume, and
our retry and error words around it."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("huggingface_hub")

from orchestrator.model.download import PROGRAM, DownloadFailed, parse_outcome  # noqa: E402
from orchestrator.sim import fake_model  # noqa: E402
from orchestrator.sim.hub import HubFaults, HubRepo, HubStandIn  # noqa: E402

REPO = "sim/pull-test"
SHARD2 = "model-00002-of-00003.safetensors"


def run(hub: HubStandIn | str, cache: Path, token: str | None = None, revision: str = "main",
        hub_wait: str = "15") -> subprocess.CompletedProcess:
    endpoint = hub if isinstance(hub, str) else hub.endpoint("127.0.0.1")
    env = {"HF_ENDPOINT": endpoint, "HF_HUB_DISABLE_TELEMETRY": "1",
           "HF_HUB_DISABLE_PROGRESS_BARS": "1", "HOME": str(cache), **({"HF_TOKEN": token} if token else {})}
    return subprocess.run([sys.executable, "-c", PROGRAM, REPO, revision, str(cache / "hub"), "3", "0.05", hub_wait],
                          capture_output=True, text=True, env=env, timeout=60)


def test_downloads_the_snapshot_in_the_hf_cache_layout_resuming_a_dropped_body(tmp_path):
    repo = HubRepo.fake(REPO)
    with HubStandIn([repo], HubFaults(drop={SHARD2: 1}), host="127.0.0.1") as hub:
        res = run(hub, tmp_path)
    got = parse_outcome("spark-1", REPO, res.stdout)
    assert got.commit == repo.commit
    root = tmp_path / "hub" / f"models--{REPO.replace('/', '--')}"
    meta = fake_model.model_metadata()
    assert sorted(p.name for p in (root / "blobs").iterdir()) == sorted(f["blob"] for f in meta["files"].values())
    assert (root / "refs" / "main").read_text() == repo.commit
    assert hub.gets(SHARD2) == 2  # cut once, then resumed with a Range request
    assert ("GET", f"/{REPO}/resolve/{repo.commit}/{SHARD2}") in hub.requests


def test_a_file_that_keeps_failing_is_retried_then_named(tmp_path):
    with HubStandIn([HubRepo.fake(REPO)], HubFaults(fail={SHARD2: -1}), host="127.0.0.1") as hub:
        res = run(hub, tmp_path)
    assert res.returncode == 1
    assert hub.gets(SHARD2) == 3
    with pytest.raises(DownloadFailed) as exc:
        parse_outcome("spark-1", REPO, res.stdout)
    assert str(exc.value).startswith(f"spark-1: downloading {REPO}: file {SHARD2} failed 3 times")
    assert "500" in str(exc.value)


def test_a_gated_repo_without_the_token_is_refused_before_any_transfer(tmp_path):
    with HubStandIn([HubRepo.fake(REPO, token="hf_good")], host="127.0.0.1") as hub:
        refused = run(hub, tmp_path)
        assert not [p for (_, p) in hub.requests if "/resolve/" in p]
        with pytest.raises(DownloadFailed, match="is gated and the Hub refused this token"):
            parse_outcome("spark-1", REPO, refused.stdout)
        assert parse_outcome("spark-1", REPO, run(hub, tmp_path, token="hf_good").stdout).commit


def test_an_unknown_revision_is_said():
    with pytest.raises(DownloadFailed, match="spark-1: sim/x: Invalid rev id: nope"):
        parse_outcome("spark-1", "sim/x", '\x1eSDPULL {"ok": false, "kind": "revision", "message": "Invalid rev id: nope"}')
    with pytest.raises(DownloadFailed, match="printed no outcome"):
        parse_outcome("spark-1", "sim/x", "Traceback ...")


def test_a_branch_is_never_resolved_by_the_cache_when_the_hub_does_not_answer(tmp_path):
    """The cache names main's commit already (a stale one, for all anyone knows): with the Hub's port closed,
    or a Hub that accepts and never answers, the branch is not taken from the cache. The program says the
    Hub did not answer, within the wait it was given, and downloads nothing."""
    with HubStandIn([HubRepo.fake(REPO)], host="127.0.0.1") as hub:
        assert parse_outcome("spark-1", REPO, run(hub, tmp_path).stdout).commit  # the cache now holds main
    closed = socket.socket()
    closed.bind(("127.0.0.1", 0))
    closed_port = closed.getsockname()[1]
    closed.close()
    silent = socket.socket()  # listens, never accepts or answers: the connection opens, no reply ever comes
    silent.bind(("127.0.0.1", 0))
    silent.listen(8)
    try:
        for endpoint in (f"http://127.0.0.1:{closed_port}", f"http://127.0.0.1:{silent.getsockname()[1]}"):
            res = run(endpoint, tmp_path, hub_wait="1")
            assert res.returncode == 1, res.stdout + res.stderr
            with pytest.raises(DownloadFailed) as exc:
                parse_outcome("spark-1", REPO, res.stdout, revision="main", endpoint=endpoint)
            said = str(exc.value)
            assert said.startswith(f"spark-1: the Hub at {endpoint} did not say which commit {REPO}@main names (")
            assert "nothing was downloaded and the recipe is unchanged" in said and "--offline" in said, said
    finally:
        silent.close()
