"""Issue 36, acceptance 5, on the simulated cluster: what every rank's engine resolved is proven after
ready. The stand-in fault that makes rank 1 resolve another attention backend fails `up` (exit 1) naming
the key and both values, and the previous release serves again; `bench --compare` of two recipes that
differ only in an env var the engine ignores is refused (exit 2) before anything is deployed, naming the
shared fingerprint."""
from __future__ import annotations


import pytest
from ruamel.yaml import YAML

from deploy_helpers import completion, our_containers, recipe_variant, spark_deploy
import cli_json

pytestmark = pytest.mark.integration


def _history(cluster) -> dict[int, dict]:
    got = spark_deploy("history", "-i", cluster.inventory_path, "--json")
    assert got.returncode == 0, got.stderr
    return {r["id"]: r for r in cli_json.result(got.stdout)}


def test_a_rank_resolving_another_attention_backend_fails_up_and_the_previous_release_serves(clean, tmp_path):
    cluster = clean
    first = spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path, timeout=600)
    assert first.returncode == 0, first.stderr + first.stdout
    engine = _history(cluster)[1]["engine"]
    assert [r["attention_backend"] for r in engine["ranks"]] == ["FLASH_ATTN", "FLASH_ATTN"]
    assert engine["ranks"][0]["non_default"]["max_num_seqs"] == 12 and engine["ranks"][1]["non_default"] is None
    status = spark_deploy("status", "-i", cluster.inventory_path)
    assert f"engine: {engine['digest']} attn FLASH_ATTN, moe B12X_MXFP4_MXFP8" in status.stdout, status.stdout

    faulty = recipe_variant(cluster, tmp_path / "r.yaml", env={"SIM_FAULT_RANK_BACKEND": "1:TRITON_ATTN"})
    failed = spark_deploy("up", faulty, "-i", cluster.inventory_path, timeout=600)
    assert failed.returncode == 1, failed.stderr + failed.stdout
    for text in ("log checks", "attention_backend", "'FLASH_ATTN' (rank 0, spark-1)",
                 "rank 1 (spark-2) resolved 'TRITON_ATTN'", "release 1 serves again"):
        assert text in failed.stderr, f"{text!r} not in:\n{failed.stderr}"
    assert completion(cluster)
    records = _history(cluster)
    assert records[2]["outcome"] == "failed" and records[2]["restored"] == 1
    assert [r["attention_backend"] for r in records[2]["engine"]["ranks"]] == ["FLASH_ATTN", "TRITON_ATTN"]


def test_compare_of_recipes_differing_only_in_env_the_engine_ignores_is_refused(clean, tmp_path):
    cluster = clean
    paths = []
    for name, env in (("base", {}), ("noted", {"EXPERIMENT": "b"})):
        yaml = YAML()
        doc = yaml.load(cluster.recipe_path.read_text())
        doc["name"] = name
        doc["env"].update(env)
        paths.append(tmp_path / f"{name}.yaml")
        with paths[-1].open("w") as handle:
            yaml.dump(doc, handle)
    run = spark_deploy("bench", "--compare", *paths, "--blocks", "AB", "-i", cluster.inventory_path,
                       "--profile", "code", "--shots", "1")
    assert run.returncode == 2, run.stderr + run.stdout
    assert "A and B run the same engine configuration (fingerprint " in run.stderr and "EXPERIMENT" in run.stderr
    assert "--same-engine-ok" in run.stderr
    assert our_containers(cluster) == {"spark-1": [], "spark-2": []}  # nothing was deployed
