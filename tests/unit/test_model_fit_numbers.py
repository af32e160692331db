"""model-fit: the shipped recipes' numbers worked by hand (weights per rank, KV bytes per token, tokens that
fit), the verdicts, and the reading of the engine's own KV-cache line.

The sim's Spark has MemTotal 125519872 kB = 128,532,348,928 B (sim/node_memory.SPARK). The two shipped
models' config.json and headers are not in the project: their tests use configs of their architectures'
shape (DeepSeek MLA with one MTP layer; Qwen3-Next-style hybrid, full attention every 4th layer) and
headers of round sizes, so every figure below can be checked with a pencil.
"""

from __future__ import annotations

import json
from pathlib import Path

from ruamel.yaml import YAML

from orchestrator.checks import model_fit as mf
from orchestrator.checks.safetensors_headers import Headers
from orchestrator.facts import fit as fit_facts
from orchestrator.preflight import checks_fit
from orchestrator.facts.memory import MemInfo
from orchestrator.facts.core import Observed
from orchestrator.checks.verdict import Status
from orchestrator.sim import fake_model

from fakes import IMAGE_ID, deployment

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
SPARK_TOTAL = 125519872 * 1024  # 128,532,348,928 B
GRAPHS_AND_NON_TORCH = 2 * 536_870_912  # 0.5 GiB each


def shipped(tmp_path, name: str):
    data = json.loads(json.dumps(YAML(typ="safe").load((RECIPES / f"{name}.yaml").read_text())))
    data["image"]["id"] = IMAGE_ID

    def edit(r: dict) -> None:
        r.clear()
        r.update(data)
    return deployment(tmp_path, recipe=edit)


def tensor(dtype: str, shape: list[int], size: int) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [0, size]}


DEEPSEEK_CONFIG = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "hidden_size": 4096,
                   "num_hidden_layers": 43, "num_attention_heads": 64, "kv_lora_rank": 512,
                   "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "num_nextn_predict_layers": 1,
                   "vocab_size": 129280, "max_position_embeddings": 1048576, "torch_dtype": "bfloat16"}
DEEPSEEK_HEADERS = {"model-00001-of-00002.safetensors": {
    "__metadata__": {"format": "pt"},
    "model.layers.0.mlp.experts.gate_up_proj.weight": tensor("U8", [160_000, 1_000_000], 160_000_000_000),
    "model.norm.weight": tensor("BF16", [4096], 8192)},
    "model-00002-of-00002.safetensors": {  # layer 43 of 43: DeepSeek's MTP layer, loaded for dspark
    "model.layers.43.mlp.experts.gate_up_proj.weight": tensor("U8", [4_000, 1_000_000], 4_000_000_000)}}

QWEN_CONFIG = {"architectures": ["Qwen3NextForCausalLM"], "model_type": "qwen3_next", "hidden_size": 2560,
               "num_hidden_layers": 48, "full_attention_interval": 4, "num_attention_heads": 16,
               "num_key_value_heads": 2, "head_dim": 256, "mtp_num_hidden_layers": 1, "vocab_size": 124160,
               "max_position_embeddings": 262144, "torch_dtype": "bfloat16"}
QWEN_HEADERS = {"model.safetensors": {
    "model.layers.0.linear_attn.in_proj_qkvz.weight": tensor("BF16", [75_000, 1_000_000], 150_000_000_000),
    "model.layers.0.input_layernorm.weight": tensor("BF16", [500_000], 1_000_000),
    "mtp.layers.0.mlp.experts.0.down_proj.weight": tensor("BF16", [1_000, 1_000_000], 2_000_000_000)}}


def test_deepseek_recipe_by_hand(tmp_path):
    dep = shipped(tmp_path, "dspark-0731-b12x")
    f = mf.fit(DEEPSEEK_HEADERS, DEEPSEEK_CONFIG, SPARK_TOTAL, fit_facts.settings(dep))
    # weights: the norm whole (8,192) + (160e9 experts + 4e9 MTP layer, dspark loads it) / TP 2
    assert f.weights == 8_192 + 164_000_000_000 // 2 == 82_000_008_192
    # MLA: (kv_lora_rank 512 + rope 64) x (43 layers + 1 MTP) x fp8 1 B, the same on both ranks
    assert (f.kv.kind, f.kv.bytes_per_token) == (mf.KvKind.MLA, 576 * 44 * 1) == (mf.KvKind.MLA, 25_344)
    # budget 0.86 x 128,532,348,928 = 110,537,820,078; activations 8192 x 4096 x 32 + 12 x 129280 x 8
    assert f.budget == 110_537_820_078 and f.activation == 1_073_741_824 + 12_410_880
    assert f.kv_memory == 110_537_820_078 - 82_000_008_192 - 1_086_152_704 - GRAPHS_AND_NON_TORCH == 26_377_917_358
    # blocks of 256 tokens x 25,344 B = 6,488,064 B: 4,065 of them
    assert f.tokens == 26_377_917_358 // 6_488_064 * 256 == 1_040_640
    assert f.tokens < f.max_model_len == 1_048_576  # the 1M context the recipe configures does not fit


def test_qwen_recipe_by_hand(tmp_path):
    dep = shipped(tmp_path, "qwen38-flash-next-mtp")
    f = mf.fit(QWEN_HEADERS, QWEN_CONFIG, SPARK_TOTAL, fit_facts.settings(dep))
    # the 1-D norm whole, the matrices and the MTP head (method mtp loads it) halved
    assert f.weights == 1_000_000 + 152_000_000_000 // 2 == 76_001_000_000
    # hybrid: 48 / 4 = 12 attention layers + 1 MTP layer; 2 KV heads / TP 2 = 1 per rank; K and V of 256;
    # no kv_cache_dtype: the model's bf16, 2 B
    assert (f.kv.kind, f.kv.bytes_per_token) == (mf.KvKind.HYBRID, 13 * 2 * 1 * 256 * 2) == (mf.KvKind.HYBRID, 13_312)
    # budget 0.68 x total; activations 8192 x 2560 x 32 + 256 (vLLM's default max_num_seqs) x 124160 x 8
    assert f.budget == 87_401_997_271 and f.activation == 671_088_640 + 254_279_680
    assert f.kv_memory == 87_401_997_271 - 76_001_000_000 - 925_368_320 - GRAPHS_AND_NON_TORCH == 9_401_887_127
    assert f.tokens == 9_401_887_127 // (13_312 * 16) * 16 == 706_256 > f.max_model_len == 262_144
    # the report behind the recipe (shared seed 004): 0.835 -> 0.68 shrank the pool from 2,128,927 to
    # 665,924 tokens, i.e. 0.155 x MemTotal per 1,463,003 tokens = 13,618 B/token: within 5% of ours
    assert abs(0.155 * SPARK_TOTAL / (2_128_927 - 665_924) / f.kv.bytes_per_token - 1) < 0.05


def sim_headers() -> tuple[dict, dict]:
    files = fake_model.model_files()
    headers = {n: fake_model.read_safetensors_header(d) for n, d in files.items() if n.endswith(".safetensors")}
    return headers, json.loads(files["config.json"])


def test_sim_recipe_by_hand_from_the_fake_models_real_headers(tmp_path):
    headers, config = sim_headers()
    f = mf.fit(headers, config, SPARK_TOTAL, fit_facts.settings(deployment(tmp_path)))
    # BF16 matrices: per layer q 8192 + k 4096 + v 4096 + o 8192 + router 512 + 4 experts x 12288 = 74,240;
    # embed 32,768, lm_head 32,768, vision 37,632 + 6,144 + 2,048 + 4,096, MTP fc 16,384 + one MTP layer
    matrices = 74_240 * 3 + 32_768 * 2 + 37_632 + 6_144 + 2_048 + 4_096 + 16_384
    # 1-D: 2 norms x 128 per layer (3 with MTP's), model.norm, 3 MTP norms (128 each), vision norm 64
    whole = 256 * 3 + 128 + 3 * 128 + 64
    assert f.weights == whole + matrices // 2 == 1_344 + 177_280
    # 2 layers x 2 (K, V) x (2 KV heads / TP 2) x head_dim 64/4 = 16 x fp8
    assert f.kv.bytes_per_token == 2 * 2 * 1 * 16 * 1 == 64
    assert f.tokens == f.kv_memory // (64 * 256) * 256 and f.tokens > 4096


def seen_for(headers: Headers | None, totals: dict[str, int], head: str = "spark-1") -> dict:
    return {n: {"model_headers": Observed(value=headers if n == head else None),
                "meminfo": Observed(value=MemInfo(t, t - (4 << 30)))} for n, t in totals.items()}


def test_weights_that_do_not_fit_fail_naming_the_node_and_the_numbers(tmp_path):
    dep = deployment(tmp_path, recipe=lambda r: r["vllm"].update(gpu_memory_utilization=0.9))
    big = {"a.safetensors": {"model.layers.0.mlp.experts.w": tensor("F8_E4M3", [235_000, 1_000_000],
                                                                   235_000_000_000)}}
    _, config = sim_headers()
    v = checks_fit.model_fit(seen_for(Headers("spark-1", "/snap", config, big, 0),
                                      {"spark-1": SPARK_TOTAL, "spark-2": SPARK_TOTAL}), dep)
    assert v.status is Status.FAIL and v.failed_nodes() == ["spark-1", "spark-2"]
    assert "weights 109.4 GiB/rank" in v.cells["spark-2"].value and "short" in v.cells["spark-2"].value
    assert "spark-1, spark-2: the weights do not fit" in v.fix and "tensor_parallel_size (now 2)" in v.fix


def test_fewer_tokens_than_max_model_len_warn_and_a_smaller_node_alone(tmp_path):
    dep = deployment(tmp_path)
    headers, config = sim_headers()
    # spark-2 with 2 GiB: 0.7 x 2 GiB = 1.4 GiB less 1 GiB of graphs and non-torch memory leaves ~0.4 GiB
    v = checks_fit.model_fit(seen_for(Headers("spark-1", "/snap", config, headers, 0),
                                      {"spark-1": SPARK_TOTAL, "spark-2": 2 << 30}), dep)
    assert v.cells["spark-1"].status is Status.OK and "max_model_len 4,096" in v.cells["spark-1"].value
    assert v.cells["spark-2"].status is Status.OK  # 0.4 GiB / 64 B is still far beyond 4,096 tokens
    small = checks_fit.model_fit(seen_for(Headers("spark-1", "/snap", config, headers, 0),
                                          {"spark-1": SPARK_TOTAL, "spark-2": int(1.4 * (1 << 30))}), dep)  # 0.98 GiB < 1 GiB
    assert small.cells["spark-2"].status is Status.FAIL and small.cells["spark-1"].status is Status.OK
    dsk = shipped(tmp_path, "dspark-0731-b12x")
    warn = checks_fit.model_fit(seen_for(Headers("spark-1", "/snap", DEEPSEEK_CONFIG, DEEPSEEK_HEADERS, 0),
                                         {"spark-1": SPARK_TOTAL, "spark-2": SPARK_TOTAL}), dsk)
    assert warn.status is Status.WARN and "1,040,640 tokens" in warn.cells["spark-1"].value
    assert "max_num_seqs 12 at full length needs 12,582,912: the rest queue" in warn.cells["spark-1"].value
    assert "max_num_seqs 12 at full length needs 49,152: fits" in v.cells["spark-1"].value
    assert "lower vllm.max_model_len" in warn.fix


def test_an_unread_head_skips_with_the_reason(tmp_path):
    dep = deployment(tmp_path)
    seen = {"spark-1": {"model_headers": Observed(error="no snapshot directory /x"),
                        "meminfo": Observed(value=MemInfo(SPARK_TOTAL, SPARK_TOTAL))},
            "spark-2": {"model_headers": Observed(value=None), "meminfo": Observed(value=MemInfo(1, 1))}}
    v = checks_fit.model_fit(seen, dep)
    assert v.status is Status.SKIP and "no snapshot directory /x" in v.cells["spark-2"].value


def test_the_fact_parser_on_the_header_readers_records():
    assert fit_facts.parse_model_headers("elsewhere\n") is None
    raw = fake_model.model_files()
    import base64
    lines = ["snap\t/s", "config\t" + base64.b64encode(raw["config.json"]).decode()]
    for name in sorted(n for n in raw if n.endswith(".safetensors")):
        n = int.from_bytes(raw[name][:8], "little")
        lines.append(f"header\t{name}\t{n}\t{base64.b64encode(raw[name][8:8 + n]).decode()}")
    h = fit_facts.parse_model_headers("\n".join(lines) + "\n")
    assert h.config["num_hidden_layers"] == 2 and len(h.headers) == 3
    try:
        fit_facts.parse_model_headers("absent\tno snapshot directory /s\n")
    except ValueError as exc:
        assert str(exc) == "no snapshot directory /s"
    else:
        raise AssertionError("an absent snapshot parsed")


# ---- the engine's own line, and the release's kv_cache entry ------------------------------------------
from orchestrator.deploy import kv_report  # noqa: E402


def test_the_logged_line_in_both_forms_the_last_one_wins():
    one = ["(EngineCore_DP0 pid=7) INFO 11-29 14:03:11 [kv_cache_utils.py:1291] GPU KV cache size: 372,529 tokens, "
           "Maximum concurrency for 32,768 tokens per request: 11.37x"]
    assert kv_report.parse_logged(one) == kv_report.Logged(372_529, 32_768, 11.37)
    two = ["INFO [kv_cache_utils.py:1087] GPU KV cache size: 665,924 tokens",
           "INFO [kv_cache_utils.py:1091] Maximum concurrency for 262,144 tokens per request: 2.54x",
           "INFO [kv_cache_utils.py:1087] GPU KV cache size: 1,024 tokens"]
    assert kv_report.parse_logged(two) == kv_report.Logged(1_024)
    assert kv_report.parse_logged(["Available KV cache memory: 3.1 GiB"]) is None


def test_the_record_takes_the_smallest_nodes_prediction_and_the_ratio(tmp_path):
    dep = deployment(tmp_path)
    headers, config = sim_headers()
    seen = seen_for(Headers("spark-1", "/snap", config, headers, 0), {"spark-1": SPARK_TOTAL, "spark-2": 8 << 30})
    small = mf.fit(headers, config, 8 << 30, fit_facts.settings(dep)).tokens
    kv = kv_report.record(seen, dep, [f"GPU KV cache size: {small + small // 50:,} tokens, Maximum concurrency "
                                      "for 4,096 tokens per request: 9.00x"])
    assert kv["predicted"] == small and kv["predicted_per_node"]["spark-1"] > small
    assert kv["logged"] == small + small // 50 and kv["ratio"] == round((small + small // 50) / small, 4)
    assert kv_report.text(kv) == f"predicted {small:,} / logged {small + small // 50:,} (1.02x)"
    none = kv_report.record({}, dep, [])
    assert none is None
    unread = kv_report.record({"spark-1": {"model_headers": Observed(error="gone")}}, dep, [])
    assert unread == {"predicted_error": "the head's snapshot headers: gone"}


def test_the_stand_in_sizes_the_fake_model_as_model_fit_does(tmp_path):
    """Two implementations (the stand-in's memory profile, stdlib only, and checks/model_fit) read the
    same checkpoint: same weights per rank and KV bytes per token; their token counts differ only by the
    profile's measured overheads."""
    import argparse
    import random

    from orchestrator.sim.standin import derived

    for name, data in fake_model.model_files().items():
        (tmp_path / name).write_bytes(data)
    headers, config = sim_headers()
    predicted = mf.fit(headers, config, SPARK_TOTAL, fit_facts.settings(deployment(tmp_path)))
    args = argparse.Namespace(kv_cache_dtype="fp8", tensor_parallel_size=2, pipeline_parallel_size=1,
                              max_num_batched_tokens=8192, max_num_seqs=12, gpu_memory_utilization=0.7,
                              block_size=256)
    weights = derived.checkpoint_bytes(str(tmp_path), config, 2, True)
    assert weights == predicted.weights and derived.checkpoint_bytes(str(tmp_path), config, 2, False) < weights
    prof = derived.profile(args, config, weights, SPARK_TOTAL, 0.3, True, random.Random(1))
    assert prof.per_token == predicted.kv.bytes_per_token == 64
    assert abs(prof.tokens / predicted.tokens - 1) < 0.05 and prof.tokens != predicted.tokens
    assert kv_report.text({"predicted_error": "no config.json"}) == "not predicted (no config.json)"
