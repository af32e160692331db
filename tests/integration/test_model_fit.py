"""Issue 20 part 2, model-fit on a real 2-node sim cluster: `up` records model-fit's predicted KV tokens next
to the stand-in's own logged line (computed by its memory profile from the same checkpoint and MemTotal)
and history/status show both, within 5%; then a recipe whose weights exceed the memory (a 235 GB FP8
checkpoint, TP=2, 0.7 of a Spark) fails preflight and `up` before anything is stopped: the first release
still serves."""

from __future__ import annotations

import json

import pytest

from deploy_helpers import assert_up_refuses, completion, recipe_variant, spark_deploy
import cli_json

pytestmark = pytest.mark.integration

BIG = "/srv/fit-big-model"
# A safetensors file whose header declares 235e9 bytes of FP8, made sparse to its full size (the header
# reader reads the header only; nothing here reads the weights).
MAKE_BIG = r'''import json, os, struct, sys
d = sys.argv[1]; os.makedirs(d, exist_ok=True)
cfg = {"architectures": ["Qwen3MoeForCausalLM"], "model_type": "qwen3_moe", "hidden_size": 4096,
       "num_hidden_layers": 94, "num_attention_heads": 64, "num_key_value_heads": 4, "head_dim": 128,
       "vocab_size": 151936, "max_position_embeddings": 4096, "torch_dtype": "bfloat16"}
json.dump(cfg, open(os.path.join(d, "config.json"), "w"))
header = json.dumps({"__metadata__": {"format": "pt"}, "model.layers.0.mlp.experts.w":
    {"dtype": "F8_E4M3", "shape": [235000, 1000000], "data_offsets": [0, 235000000000]}}).encode()
header += b" " * (-len(header) % 8)
path = os.path.join(d, "model.safetensors")
with open(path, "wb") as fh:
    fh.write(struct.pack("<Q", len(header)) + header)
os.truncate(path, 8 + len(header) + 235000000000)
os.chmod(d, 0o755); os.chmod(path, 0o644); os.chmod(os.path.join(d, "config.json"), 0o644)
'''


def run_json(cluster, *args: str):
    result = spark_deploy(*args, "-i", cluster.inventory_path, "--json", timeout=120)
    return result, cli_json.result(result.stdout) if result.stdout.strip() else None


def test_predicted_and_logged_kv_agree_and_an_oversized_model_is_refused_before_anything_stops(clean, tmp_path):
    cluster = clean
    up = spark_deploy("up", cluster.recipe_path, "-i", cluster.inventory_path, timeout=240)
    assert up.returncode == 0, up.stdout + up.stderr
    assert "KV cache tokens: predicted" in up.stdout + up.stderr
    res, releases = run_json(cluster, "history")
    assert res.returncode == 0, res.stderr
    kv = releases[0]["kv_cache"]
    assert kv["predicted"] > 4096 and kv["logged"] > 4096 and kv["kv_bytes_per_token"] == 64, kv
    assert abs(kv["logged"] / kv["predicted"] - 1) < 0.05 and kv["ratio"] == round(kv["logged"] / kv["predicted"], 4)
    res, status = run_json(cluster, "status")
    assert res.returncode == 0, res.stderr
    [dep] = status["deployments"]
    assert dep["release"] == releases[0]["id"] and dep["kv_cache"]["logged"] == kv["logged"]
    shown = spark_deploy("status", "-i", cluster.inventory_path).stdout
    assert f"KV cache tokens: predicted {kv['predicted']:,} / logged {kv['logged']:,}" in shown, shown

    for node in (1, 2):
        cluster.exec(node, ["python3", "-c", MAKE_BIG, BIG])
    try:
        big = recipe_variant(cluster, tmp_path / "big.yaml", model={"repo": BIG})
        res, report = run_json(cluster, "preflight", str(big), "--only", "model-fit")
        assert res.returncode == 1, res.stdout + res.stderr
        [fit] = [c for c in report["checks"] if c["name"] == "model-fit"]
        for node in ("spark-1", "spark-2"):
            cell = fit["per_node"][node]
            assert cell["status"] == "fail", fit
            # 235e9 / 2 = 117.5e9 B = 109.4 GiB per rank against 0.7 x MemTotal 119.7 GiB = 83.8 GiB
            assert "weights 109.4 GiB/rank" in cell["value"] and "0.7 x 119.7 GiB = 83.8 GiB" in cell["value"], cell
            assert "short, no room for a KV cache" in cell["value"], cell
        assert "spark-1, spark-2: the weights do not fit" in fit["fix"]
        assert_up_refuses(cluster, big, "model-fit", "spark-1", "weights 109.4 GiB/rank")
        res, status = run_json(cluster, "status")
        assert res.returncode == 0 and status["deployments"][0]["release"] == releases[0]["id"], status
        assert completion(cluster)  # the first release still serves
    finally:
        for node in (1, 2):
            cluster.exec(node, ["rm", "-rf", BIG], check=False)
