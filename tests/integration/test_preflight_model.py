"""Issue 10, model revision parity on a real 2-node sim cluster: a healthy cache passes; a shard removed, a
blob changed, or an `.incomplete` blob left on spark-2 fails `spark-deploy preflight` naming spark-2, the
check and both values, and `up` refuses the same way; `model-reset` puts the node back and preflight passes again."""

from __future__ import annotations


import pytest

from deploy_helpers import assert_up_refuses, blobs_on, recipe_variant, spark_deploy
from deploy_helpers import MODEL_ROOT as ROOT
import cli_json

pytestmark = pytest.mark.integration

CHECKS = ("model-files", "model-shards", "model-incomplete")
SHARD2 = "model-00002-of-00003.safetensors"


def preflight(cluster, *extra: str, recipe=None):
    only = [a for c in CHECKS for a in ("--only", c)]
    return spark_deploy("preflight", recipe or cluster.recipe_path, "-i", cluster.inventory_path, *only, *extra,
                        timeout=120)


def verdicts(result) -> dict[str, dict]:
    return {c["name"]: c for c in cli_json.result(result.stdout)["checks"]}


def blob_of(cluster, node: int, name: str) -> str:
    """The blob a snapshot file points at on that node, read with the node's own readlink."""
    rev = cluster.exec(node, ["cat", f"{ROOT}/refs/main"]).stdout.strip()
    return cluster.exec(node, ["readlink", f"{ROOT}/snapshots/{rev}/{name}"]).stdout.strip().rsplit("/", 1)[-1]


def incomplete_blobs(cluster, node: int) -> list[str]:
    return [name for name in blobs_on(cluster, node) if name.endswith(".incomplete")]


def assert_healthy(cluster) -> None:
    res = preflight(cluster, "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    got = verdicts(res)
    for name in CHECKS:
        assert {n: c["status"] for n, c in got[name]["per_node"].items()} == {"spark-1": "ok", "spark-2": "ok"}, got


@pytest.fixture
def pair(pair):
    """The shared cluster, its model cache checked healthy first."""
    assert_healthy(pair)
    return pair


def test_remove_shard(pair):
    blob = blob_of(pair, 1, SHARD2)
    pair.fault(2, "model-remove-shard")
    res = preflight(pair, "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    got = verdicts(res)
    files = got["model-files"]["per_node"]
    assert files["spark-1"]["status"] == "ok"
    assert files["spark-2"]["status"] == "fail"
    assert files["spark-2"]["value"] == f"{SHARD2}: missing vs spark-1: blob {blob[:16]} (76136 B)"
    shards = got["model-shards"]["per_node"]
    assert shards["spark-2"] == {"status": "fail", "value": f"missing: {SHARD2} (the index names 3)"}
    assert shards["spark-1"]["status"] == "ok"
    assert got["model-incomplete"]["status"] == "ok"
    # the table names the failed node, the check and its fix
    table = preflight(pair)
    assert table.returncode == 1
    assert "model-shards (spark-2): shards the index names are missing on spark-2" in table.stdout
    assert_up_refuses(pair, pair.recipe_path, "model-shards", "spark-2", SHARD2)
    pair.fault(2, "model-reset")
    assert_healthy(pair)


def test_change_blob(pair):
    before = blob_of(pair, 2, SHARD2)
    pair.fault(2, "model-change-blob")
    after = blob_of(pair, 2, SHARD2)
    assert after != before and blob_of(pair, 1, SHARD2) == before
    res = preflight(pair, "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    files = verdicts(res)["model-files"]
    cell = files["per_node"]["spark-2"]
    assert cell["status"] == "fail"
    assert cell["value"] == (f"{SHARD2}: blob {after[:16]} (76136 B) vs spark-1: blob {before[:16]} (76136 B)")
    assert f"{SHARD2}: spark-1: blob {before} (76136 B), spark-2: blob {after} (76136 B)" in files["fix"]
    assert verdicts(res)["model-shards"]["status"] == "ok"  # the file is there: only its content differs
    assert_up_refuses(pair, pair.recipe_path, "model-files", "spark-2", after[:16])
    pair.fault(2, "model-reset")
    assert_healthy(pair)


def test_incomplete_blob(pair):
    pair.fault(2, "model-incomplete")
    partial = incomplete_blobs(pair, 2)
    assert len(partial) == 1
    res = preflight(pair, "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    got = verdicts(res)["model-incomplete"]
    assert got["per_node"]["spark-1"] == {"status": "ok", "value": "no .incomplete blob"}
    assert got["per_node"]["spark-2"] == {"status": "fail", "value": f"partial download: blobs/{partial[0]} (4096 B)"}
    assert "spark-2" in got["fix"] and f"spark-deploy model pull {pair.recipe_path} --revision main -i {pair.inventory_path}" in got["fix"]
    assert_up_refuses(pair, pair.recipe_path, "model-incomplete", "spark-2", partial[0])
    pair.fault(2, "model-reset")
    assert not incomplete_blobs(pair, 2)
    assert_healthy(pair)


def test_revision_not_in_the_cache(pair, tmp_path):
    recipe = recipe_variant(pair, tmp_path / "recipe-v2.yaml", model={"revision": "v2"})
    res = preflight(pair, "--json", recipe=recipe)
    assert res.returncode == 1, res.stdout + res.stderr
    for name, check in verdicts(res).items():
        if name in CHECKS:
            assert {n: c["status"] for n, c in check["per_node"].items()} == {"spark-1": "fail", "spark-2": "fail"}
            assert check["per_node"]["spark-2"]["value"] == f"no snapshot: no refs/v2 in {ROOT}"
            assert f"spark-deploy model pull {recipe} --revision v2" in check["fix"]



def test_verify_blobs_finds_bytes_changed_under_the_same_name(pair):
    """Names agree, so the default checks pass; only hashing the blobs (--verify-blobs) sees the rot."""
    res = preflight(pair, "--json", "--verify-blobs")
    assert res.returncode == 0, res.stdout + res.stderr
    blobs = verdicts(res)["model-blobs"]["per_node"]
    for node in ("spark-1", "spark-2"):
        assert blobs[node]["status"] == "ok" and blobs[node]["value"].startswith(
            "every blob hashes to its name: 5 blobs, 0."), blobs  # 3 LFS shards (sha256) + 2 git files (sha1)
        assert " MB/s" in blobs[node]["value"]
    assert "model-blobs" not in verdicts(preflight(pair, "--json"))  # opt-in: never run unasked

    blob = blob_of(pair, 2, SHARD2)
    pair.exec(2, ["dd", "if=/dev/urandom", f"of={ROOT}/blobs/{blob}", "bs=1", "count=16", "seek=4096",
                  "conv=notrunc", "status=none"])
    assert blob_of(pair, 2, SHARD2) == blob
    assert_healthy(pair)  # same name, same size: the cheap checks cannot tell
    res = preflight(pair, "--json", "--verify-blobs")
    assert res.returncode == 1, res.stdout + res.stderr
    got = verdicts(res)["model-blobs"]
    assert got["per_node"]["spark-1"]["status"] == "ok"
    cell = got["per_node"]["spark-2"]
    assert cell["status"] == "fail" and cell["value"].startswith(f"{SHARD2}: blob {blob[:16]} hashes to "), cell
    assert "spark-2" in got["fix"] and "--revision main" in got["fix"]
    pair.fault(2, "model-reset")
    assert preflight(pair, "--json", "--verify-blobs").returncode == 0
