"""Issue 39, acceptance 1, on the shared 2-node sim: `fit` against the Hub stand-in serving a model whose
headers say 83 GiB per rank answers per node with each node's MemTotal, from header ranges only (the
stand-in counts the bytes); `model pull` of a model that cannot fit exits 1 before any download; with the
model in the head's cache, `fit` reads it there and never asks the Hub."""

from __future__ import annotations

import socket

import pytest

from deploy_helpers import recipe_variant, spark_deploy
from orchestrator.sim import fake_big, fake_model
from orchestrator.sim.hub import HubStandIn, SparseFile
from orchestrator.sim.node_memory import SPARK
import cli_json

pytestmark = pytest.mark.integration

GIB = 1 << 30
PREFETCH = 100_001  # huggingface_hub's first header read: bytes=0-100000
BIG = fake_big.repo("sim/big-83", 83)


@pytest.fixture
def hub(pair):
    """The 83 GiB-per-rank model on the Hub stand-in, reachable from here and from the nodes' gateway."""
    with HubStandIn([BIG]) as server:
        yield server, {"HF_ENDPOINT": server.endpoint(pair.info()["gateway"])}


def big_recipe(pair, tmp_path, utilization: float):
    return recipe_variant(pair, tmp_path / f"big-{utilization}.yaml", model={"repo": BIG.repo_id, "revision": BIG.commit},
                          vllm={"gpu_memory_utilization": utilization})


def only_header_ranges(server: HubStandIn, runs: int = 1) -> None:
    """`runs` header reads and nothing else: each shard by closed ranges inside huggingface_hub's first read,
    config.json the one file sent whole."""
    shards = [s for s in server.served if s.name.endswith(".safetensors")]
    assert len(shards) == runs * fake_big.SHARDS and all(s.ranged and s.stop <= PREFETCH for s in shards), shards
    assert server.downloaded == runs * len(BIG.files["config.json"])
    assert server.weight_bytes <= runs * fake_big.SHARDS * PREFETCH
    assert sum(f.size for f in BIG.files.values() if isinstance(f, SparseFile)) > 160 * GIB


def test_fit_reads_each_nodes_memtotal_and_only_header_ranges(pair, hub, tmp_path):
    server, env = hub
    res = spark_deploy("fit", str(big_recipe(pair, tmp_path, 0.8)), "-i", str(pair.inventory_path), "--json", env=env)
    assert res.returncode == 0, res.stdout + res.stderr
    got = cli_json.result(res.stdout)
    assert got["ok"] and got["memory_from"] == "MemTotal read from each node (/proc/meminfo)"
    assert got["source"].startswith(f"the Hub at {env['HF_ENDPOINT']} ") and "not from spark-1's cache" in got["source"]
    assert sorted(got["nodes"]) == ["spark-1", "spark-2"]
    for node in got["nodes"].values():
        assert node["mem_total"] == SPARK["MemTotal"] * 1024 and round(node["weights_per_rank"] / GIB) == 83
        assert node["state"] == "fits" and node["tokens"] >= 4096 and node["kv_bytes_per_token"] == 65536
    only_header_ranges(server)


def test_model_pull_of_a_model_that_cannot_fit_exits_1_before_any_download(pair, hub, tmp_path):
    server, env = hub
    recipe = big_recipe(pair, tmp_path, 0.7)
    table = spark_deploy("fit", str(recipe), "-i", str(pair.inventory_path), env=env)
    assert table.returncode == 1 and "weights-do-not-fit" in table.stdout, table.stdout + table.stderr
    res = spark_deploy("model", "pull", str(recipe), "-i", str(pair.inventory_path), env=env)
    assert res.returncode == 1, res.stdout + res.stderr
    said = " ".join(res.stderr.split())
    assert "sim/big-83@" in said and "cannot fit: spark-1: weights 83.0 GiB/rank" in said, said
    assert "Nothing was downloaded" in said and "--no-fit" in said
    only_header_ranges(server, runs=2)  # fit's read, then model pull's own, and no download
    cache = f"{fake_model.HF_CACHE_DIR}/hub/models--sim--big-83"
    for node in (1, 2):
        assert pair.exec(node, ["test", "-e", cache], check=False).code != 0  # nothing written on any node


def test_the_heads_cache_is_read_when_it_holds_the_model_and_the_hub_is_not_asked(pair, tmp_path):
    closed = socket.socket()
    closed.bind(("0.0.0.0", 0))
    port = closed.getsockname()[1]
    closed.close()
    meta = fake_model.model_metadata()
    recipe = recipe_variant(pair, tmp_path / "tiny.yaml", model={"revision": meta["revision"]})
    res = spark_deploy("fit", str(recipe), "-i", str(pair.inventory_path), "--json",
                       env={"HF_ENDPOINT": f"http://127.0.0.1:{port}"})
    assert res.returncode == 0, res.stdout + res.stderr
    got = cli_json.result(res.stdout)
    assert got["source"].startswith("spark-1's cache (") and got["revision"] == meta["revision"]
    assert {n["state"] for n in got["nodes"].values()} == {"fits"}
