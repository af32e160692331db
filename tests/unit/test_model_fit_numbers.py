"""model-fit: the shipped recipes' numbers worked by hand (weights per rank, KV bytes per token, tokens that
fit), the verdicts, and the reading of the engine's own KV-cache line.

The sim's Spark has MemTotal 125519872 kB = 128,532,348,928 B (sim/node_memory.SPARK). The two shipped
models' config.json and headers are not in the project: their tests use configs of their architectures'
shape and headers of round sizes, so every figure below can be checked with a pencil. The DeepSeek recipe
deploys DeepSeek-V4, whose KV cache vLLM 0.33.0 lays out in its own attention (model-fit cannot judge it:
DEEPSEEK_V4_CONFIG); the generic MLA rule is worked on a DeepSeek-V3-shaped config (MLA_CONFIG, one MTP
layer) under that recipe's settings; Qwen3-Next-style hybrid has full attention every 4th layer.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from orchestrator.checks import model_fit as mf
from orchestrator.checks.kv_layout import UnknownLayout
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


def shipped(tmp_path, name: str, **vllm):
    data = json.loads(json.dumps(YAML(typ="safe").load((RECIPES / f"{name}.yaml").read_text())))
    data["image"]["id"] = IMAGE_ID
    data["vllm"].update(vllm)

    def edit(r: dict) -> None:
        r.clear()
        r.update(data)
    return deployment(tmp_path, recipe=edit)


def tensor(dtype: str, shape: list[int], size: int) -> dict:
    return {"dtype": dtype, "shape": shape, "data_offsets": [0, size]}


# The generic MLA layer (vLLM 0.33.0 model_executor/models/deepseek_v2.py, DeepseekV3ForCausalLM): one latent of
# kv_lora_rank + qk_rope_head_dim per token per layer. 43 layers + 1 MTP layer, so the recipe's numbers carry over.
MLA_CONFIG = {"architectures": ["DeepseekV3ForCausalLM"], "model_type": "deepseek_v3", "hidden_size": 4096,
              "num_hidden_layers": 43, "num_attention_heads": 64, "kv_lora_rank": 512,
              "qk_rope_head_dim": 64, "qk_nope_head_dim": 128, "num_nextn_predict_layers": 1,
              "vocab_size": 129280, "max_position_embeddings": 1048576, "torch_dtype": "bfloat16"}
# DeepSeek-V4-shaped: the keys vLLM 0.33.0's models/deepseek_v4/attention.py reads (no kv_lora_rank: a 512-wide
# head_dim whose 64 last are RoPE; per layer `compress_rates[layer_types[i]]`, 4 for compressed_sparse_attention
# (with the Lightning indexer: index_*), 128 for heavily_compressed_attention, none (sliding only) for
# sliding_attention; `sliding_window` tokens per layer's window). The values and the layer pattern are
# V4-Flash-like round numbers, not read from the checkpoint (which is not in the project).
V4_LAYER_TYPES = (["sliding_attention"] * 2
                  + ["compressed_sparse_attention", "heavily_compressed_attention"] * 20 + ["sliding_attention"])
DEEPSEEK_V4_CONFIG = {"architectures": ["DeepseekV4ForCausalLM"], "model_type": "deepseek_v4", "hidden_size": 4096,
                      "num_hidden_layers": 43, "num_attention_heads": 64, "head_dim": 512, "qk_rope_head_dim": 64,
                      "q_lora_rank": 1024, "o_lora_rank": 1024, "o_groups": 8, "sliding_window": 128,
                      "layer_types": V4_LAYER_TYPES,
                      "compress_rates": {"compressed_sparse_attention": 4, "heavily_compressed_attention": 128},
                      "index_topk": 512, "index_n_heads": 64, "index_head_dim": 128, "num_nextn_predict_layers": 1,
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


def test_the_generic_mla_rule_by_hand_under_the_deepseek_recipe(tmp_path):
    dep = shipped(tmp_path, "dspark-0731-b12x")
    f = mf.fit(DEEPSEEK_HEADERS, MLA_CONFIG, SPARK_TOTAL, fit_facts.settings(dep))
    # weights: the norm whole (8,192) + (160e9 experts + 4e9 MTP layer, dspark loads it) / TP 2
    assert f.weights == 8_192 + 164_000_000_000 // 2 == 82_000_008_192
    # MLA: (kv_lora_rank 512 + rope 64) x (43 layers + 1 MTP) x fp8 1 B, the same on both ranks
    assert (f.kv.kind, f.kv.bytes_per_token) == (mf.KvKind.MLA, 576 * 44 * 1) == (mf.KvKind.MLA, 25_344)
    # budget 0.86 x 128,532,348,928 = 110,537,820,078; activations 8192 x 4096 x 32 + 12 x 129280 x 8
    assert f.budget == 110_537_820_078 and f.activation == 1_073_741_824 + 12_410_880
    assert f.kv_memory == 110_537_820_078 - 82_000_008_192 - 1_086_152_704 - GRAPHS_AND_NON_TORCH == 26_377_917_358
    # blocks of 256 tokens x 25,344 B = 6,488,064 B: 4,065 of them
    assert f.tokens == 26_377_917_358 // 6_488_064 * 256 == 1_040_640
    assert f.tokens < f.max_model_len == 1_048_576  # a V3-shaped model would not hold the recipe's 1M context


def test_the_generic_mla_rule_with_the_ds_mla_dtypes_by_hand(tmp_path):
    """vLLM 0.33.0's ds_mla layouts (mla_attention.py state_content_bytes, flashmla_sparse.py): fp8_ds_mla
    656 B a token a layer = 512 fp8 NoPE + 4 fp32 scales (16 B) + 64 bf16 RoPE (128 B); nvfp4_ds_mla 352 B
    = 512 fp4 (256 B) + 64 fp8 RoPE + 32 fp8 scales. Not kv_lora_rank + rope values x 1 B (576 B)."""
    fp8 = mf.fit(DEEPSEEK_HEADERS, MLA_CONFIG, SPARK_TOTAL,
                 fit_facts.settings(shipped(tmp_path, "dspark-0731-b12x", kv_cache_dtype="fp8_ds_mla")))
    # the budget is the dtype's business only through the bytes a token costs: the same KV memory as fp8
    assert fp8.kv_memory == 26_377_917_358
    assert (fp8.kv.kind, fp8.kv.bytes_per_token) == (mf.KvKind.MLA, 44 * (512 + 16 + 128)) == (mf.KvKind.MLA, 28_864)
    # blocks of 256 tokens x 28,864 B = 7,389,184 B: 3,569 of them
    assert fp8.tokens == 26_377_917_358 // 7_389_184 * 256 == 913_664 < fp8.max_model_len
    nvfp4 = mf.fit(DEEPSEEK_HEADERS, MLA_CONFIG, SPARK_TOTAL,
                   fit_facts.settings(shipped(tmp_path, "dspark-0731-b12x", kv_cache_dtype="nvfp4_ds_mla")))
    assert nvfp4.kv.bytes_per_token == 44 * (256 + 64 + 32) == 15_488
    # blocks of 256 x 15,488 B = 3,964,928 B: 6,652 of them, and the 1M context fits
    assert nvfp4.tokens == 26_377_917_358 // 3_964_928 * 256 == 1_702_912 > nvfp4.max_model_len == 1_048_576
    assert "44 layers x 656 B (512 fp8 + 16 B scales + 64 bf16 rope)" in mf.describe(fp8)


V4_WHY = "vLLM 0.33.0 lays DeepSeek-V4's cache out in its own attention (compressed states, sliding windows)"


@pytest.mark.parametrize("kv", ["fp8", "auto", None, "fp8_ds_mla", "nvfp4_ds_mla", "bfloat16", "nvfp4"])
def test_deepseek_v4_has_no_per_token_rule_never_the_mla_number(kv):
    """The per-token rule (kv_shape) refuses V4: its cache is not one latent a token (the generic MLA 656 B
    would be another layout's number); fit() sizes it by kv_layout.deepseek_v4 instead (below)."""
    with pytest.raises(UnknownLayout, match=re.escape(f"model_type deepseek_v4: {V4_WHY}")):
        mf.kv_shape(DEEPSEEK_V4_CONFIG, 2, kv, draft=True)


# One 1,048,576-token request of DEEPSEEK_V4_CONFIG under the shipped recipe (block-size 256, max-num-batched-
# tokens 8192, async scheduling vLLM's default: 2 batches in flight = 16,384 tokens; dspark: 3 draft layers,
# models/deepseek_v4/nvidia/dspark.py:106), every part as vLLM 0.33.0's spec computes max_memory_usage_bytes,
# each page padded up to a multiple of 576 B:
#   sliding window, 43 + 3 layers: 64 tokens x 584 B = 37,376 -> 37,440 B a page;
#       cdiv(min(128 - 1 + 16,384, 1M), 64) + 1 = 258 + 1 = 259 pages             46 x 259 x 37,440 =   446,060,160
#   C4 states, 20 layers: 256 / 4 = 64 x 584 = 37,376 -> 37,440; cdiv(1M, 256) = 4,096   20 x 4,096 x 37,440 = 3,067,084,800
#   C4 compressor: 4 rows x fp32 (2 x 2 x 512) = 32,768 -> 32,832;
#       cdiv(min(8 - 1 + 16,384, 1M), 4) + 1 = 4,098 + 1 = 4,099                  20 x 4,099 x 32,832 = 2,691,567,360
#   C128 states: 256 / 128 = 2 x 584 = 1,168 -> 1,728; 4,096 pages               20 x 4,096 x 1,728  =   141,557,760
#   C128 compressor: 8 rows x fp32 (2 x 1 x 512) = 32,768 -> 32,832;
#       cdiv(min(128 - 1 + 16,384, 1M), 8) + 1 = 2,064 + 1 = 2,065                 20 x 2,065 x 32,832 = 1,355,961,600
#   C4 indexer K: 64 x (128 fp8 + 4 B scale) = 8,448 -> 8,640; 4,096 pages      20 x 4,096 x 8,640  =   707,788,800
#   C4 indexer compressor: 4 rows x fp32 (2 x 2 x 128) = 8,192 -> 8,640; 4,099    20 x 4,099 x 8,640  =   708,307,200
#                                                                                               sum = 9,118,327,680
V4_REQUEST = 446_060_160 + 3_067_084_800 + 2_691_567_360 + 141_557_760 + 1_355_961_600 + 707_788_800 + 708_307_200


@pytest.mark.parametrize("kv", ["fp8", "auto", "fp8_ds_mla", "fp8_e4m3"])
def test_deepseek_v4_kv_by_hand_under_the_shipped_recipe(tmp_path, kv):
    """On a Spark vLLM stores V4's cache as fp8_ds_mla for auto and every fp8 (attention.py
    _resolve_dsv4_kv_cache_dtype): the same bytes for each."""
    dep = shipped(tmp_path, "dspark-0731-b12x", kv_cache_dtype=kv)
    f = mf.fit(DEEPSEEK_HEADERS, DEEPSEEK_V4_CONFIG, SPARK_TOTAL, fit_facts.settings(dep))
    assert f.kv.kind == mf.KvKind.DEEPSEEK_V4 and f.kv.request_bytes == V4_REQUEST == 9_118_327_680
    assert [(p.layers, p.pages(f.max_model_len, f.kv.in_flight), p.page) for p in f.kv.parts] == [
        (46, 259, 37_440), (20, 4_096, 37_440), (20, 4_099, 32_832), (20, 4_096, 1_728), (20, 2_065, 32_832),
        (20, 4_096, 8_640), (20, 4_099, 8_640)]
    # the same weights and budget as any checkpoint: 26,377,917,358 B of KV memory
    assert f.weights == 82_000_008_192 and f.kv_memory == 26_377_917_358
    # vLLM's `GPU KV cache size`: pool / one request x max_model_len (kv_cache_utils.get_kv_cache_capacity)
    assert f.tokens == 26_377_917_358 * 1_048_576 // 9_118_327_680 == 3_033_368
    assert f.state is mf.FitState.FITS  # the 1M context fits (the generic MLA rule said 1,040,640 < 1M)
    assert f.kv.bytes_per_token == -(-9_118_327_680 // 1_048_576) == 8_696
    text = mf.describe(f)
    assert "one 1,048,576-token request needs 8.5 GiB (deepseek-v4, fp8_ds_mla: sliding window: 46 x 259 pages" in text
    assert "-> ~3,033,368 tokens = 2.89x max_model_len" in text


def test_deepseek_v4_without_async_scheduling_holds_one_batch_in_flight(tmp_path):
    dep = shipped(tmp_path, "dspark-0731-b12x")
    dep.recipe.vllm.extra["async-scheduling"] = False
    f = mf.fit(DEEPSEEK_HEADERS, DEEPSEEK_V4_CONFIG, SPARK_TOTAL, fit_facts.settings(dep))
    assert f.kv.in_flight == 8_192
    # sliding window: cdiv(127 + 8192, 64) + 1 = 131 pages; the compressors: cdiv(7 + 8192, 4) + 1 = 2,051 and
    # cdiv(127 + 8192, 8) + 1 = 1,041; the growing parts as before
    assert [p.pages(f.max_model_len, 8_192) for p in f.kv.parts] == [131, 4_096, 2_051, 4_096, 1_041, 4_096, 2_051]
    assert f.kv.request_bytes == (46 * 131 * 37_440 + 20 * 4_096 * (37_440 + 1_728 + 8_640) + 20 * 2_051 * 32_832
                                  + 20 * 1_041 * 32_832 + 20 * 2_051 * 8_640) == 6_526_788_480


def test_deepseek_v4_kv_below_max_model_len_fails_naming_the_rule(tmp_path):
    """0.72 x 128,532,348,928 = 92,543,291,228 B budget leaves 8,383,388,508 B < the 9,118,327,680 B one
    1M request needs: vLLM refuses to start (kv_cache_planning.check_enough_kv_cache_memory)."""
    dep = shipped(tmp_path, "dspark-0731-b12x", gpu_memory_utilization=0.72)
    f = mf.fit(DEEPSEEK_HEADERS, DEEPSEEK_V4_CONFIG, SPARK_TOTAL, fit_facts.settings(dep))
    assert f.kv_memory == 92_543_291_228 - 82_000_008_192 - 1_086_152_704 - GRAPHS_AND_NON_TORCH == 8_383_388_508
    assert f.tokens == 8_383_388_508 * 1_048_576 // 9_118_327_680 == 964_060 and f.state is mf.FitState.KV_SHORT
    v = checks_fit.model_fit(seen_for(Headers("spark-1", "/snap", DEEPSEEK_V4_CONFIG, DEEPSEEK_HEADERS, 0),
                                      {"spark-1": SPARK_TOTAL, "spark-2": SPARK_TOTAL}), dep)
    assert v.status is Status.FAIL and v.failed_nodes() == ["spark-1", "spark-2"]
    assert "rule kv-tokens-below-max-model-len" in v.fix


@pytest.mark.parametrize("kv", ["nvfp4_ds_mla", "bfloat16", "nvfp4"])
def test_deepseek_v4_kv_dtypes_vllm_refuses_fail_quoting_it_never_a_number(tmp_path, kv):
    dep = shipped(tmp_path, "dspark-0731-b12x", kv_cache_dtype=kv)
    with pytest.raises(UnknownLayout, match="fp8_ds_mla layout only supports fp8 kv-cache"):
        mf.fit(DEEPSEEK_HEADERS, DEEPSEEK_V4_CONFIG, SPARK_TOTAL, fit_facts.settings(dep))
    f = mf.fit(DEEPSEEK_HEADERS, DEEPSEEK_V4_CONFIG, SPARK_TOTAL, fit_facts.settings(dep), kv_optional=True)
    assert f.kv is None and f.state is mf.FitState.KV_REFUSED and f.state.fails
    v = checks_fit.model_fit(seen_for(Headers("spark-1", "/snap", DEEPSEEK_V4_CONFIG, DEEPSEEK_HEADERS, 0),
                                      {"spark-1": SPARK_TOTAL, "spark-2": SPARK_TOTAL}), dep)
    assert v.status is Status.FAIL and v.failed_nodes() == ["spark-1", "spark-2"]
    assert v.cells["spark-1"].value.startswith(f"kv_cache_dtype {kv}: vLLM 0.33.0 refuses it for DeepSeek-V4")
    assert f'"DeepseekV4 fp8_ds_mla layout only supports fp8 kv-cache, got {kv}"' in v.fix
    assert "rule kv-dtype-refused" in v.fix and "tokens" not in v.cells["spark-1"].value


def test_what_counts_as_deepseek_v4_and_what_keeps_the_generic_rules():
    from orchestrator.checks import kv_layout
    for cfg in (DEEPSEEK_V4_CONFIG, {"model_type": "deepseek_v41"}, {"architectures": ["DSparkDeepseekV4ForCausalLM"]},
                {"text_config": {**DEEPSEEK_V4_CONFIG, "model_type": "x"}, "model_type": "deepseek_v41"},
                {**MLA_CONFIG, "compress_ratios": [4, 128, 0]}):  # vLLM's own test: get_compress_ratios
        assert V4_WHY in kv_layout.own_layout(mf.text_config(cfg)), cfg
    for cfg in (MLA_CONFIG, {**MLA_CONFIG, "model_type": "deepseek_v32", "architectures": ["DeepseekV32ForCausalLM"]},
                {**MLA_CONFIG, "model_type": "deepseek_v2"}, QWEN_CONFIG):  # the generic MLAAttention / attention
        assert kv_layout.own_layout(cfg) is None, cfg["model_type"]


NO_BLOCK = "DeepSeek-V4's block size is picked by its attention backend at start (the recipe sets no block-size)"


def test_the_deepseek_v4_recipe_without_a_block_size_warns_on_kv_and_still_judges_the_weights(tmp_path):
    """V4's block size is its attention backend's choice at start: without `block-size` the KV is not judged."""
    dep = shipped(tmp_path, "dspark-0731-b12x")
    del dep.recipe.vllm.extra["block-size"]
    with pytest.raises(UnknownLayout):  # the strict form (kv_report's prediction) refuses to give a number
        mf.fit(DEEPSEEK_HEADERS, DEEPSEEK_V4_CONFIG, SPARK_TOTAL, fit_facts.settings(dep))
    f = mf.fit(DEEPSEEK_HEADERS, DEEPSEEK_V4_CONFIG, SPARK_TOTAL, fit_facts.settings(dep), kv_optional=True)
    # the weights as for any checkpoint: the norm whole + (160e9 experts + 4e9 MTP layer 43, dspark loads it) / 2
    assert f.kv is None and f.weights == 8_192 + 164_000_000_000 // 2 == 82_000_008_192
    assert f.kv_memory == 110_537_820_078 - 82_000_008_192 - 1_086_152_704 - GRAPHS_AND_NON_TORCH == 26_377_917_358
    with pytest.raises(UnknownLayout):
        f.tokens
    assert "kv_kind" not in f.as_dict() and f.as_dict()["kv_memory"] == 26_377_917_358
    v = checks_fit.model_fit(seen_for(Headers("spark-1", "/snap", DEEPSEEK_V4_CONFIG, DEEPSEEK_HEADERS, 0),
                                      {"spark-1": SPARK_TOTAL, "spark-2": SPARK_TOTAL}), dep)
    # not the 1,040,640 tokens < 1,048,576 failure the generic MLA rule gave: a warning, never a KV failure
    assert v.status is Status.WARN and v.failed_nodes() == [] and set(v.cells) == {"spark-1", "spark-2"}
    for cell in v.cells.values():
        assert cell.value.startswith(f"cannot judge the KV cache: {NO_BLOCK}")
        assert "weights 76.4 GiB/rank" in cell.value and "leaves 24.6 GiB KV" in cell.value
        assert "tokens" not in cell.value.replace("tokens that fit not judged", "")
    assert "rule kv-tokens-below-max-model-len" not in v.fix and "GPU KV cache size" in v.fix
    # the weights are still judged: 235 GB of FP8 experts / 2 = 117.5 GB > the 110.5 GB budget
    big = {"a.safetensors": {"model.layers.0.mlp.experts.w": tensor("F8_E4M3", [235_000, 1_000_000],
                                                                   235_000_000_000)}}
    heavy = checks_fit.model_fit(seen_for(Headers("spark-1", "/snap", DEEPSEEK_V4_CONFIG, big, 0),
                                          {"spark-1": SPARK_TOTAL, "spark-2": SPARK_TOTAL}), dep)
    assert heavy.status is Status.FAIL and heavy.failed_nodes() == ["spark-1", "spark-2"]
    assert "short, no room for a KV cache" in heavy.cells["spark-1"].value and "the weights do not fit" in heavy.fix
    # the release records the engine's own line and why there is no prediction
    seen = seen_for(Headers("spark-1", "/snap", DEEPSEEK_V4_CONFIG, DEEPSEEK_HEADERS, 0),
                    {"spark-1": SPARK_TOTAL, "spark-2": SPARK_TOTAL})
    kv = kv_report.record(seen, dep, ["GPU KV cache size: 2,000,000 tokens"])
    assert NO_BLOCK in kv["predicted_error"] and kv["logged"] == 2_000_000 and "predicted" not in kv


def test_the_attention_dtypes_laid_out_as_vllm_does(tmp_path):
    """Qwen3-Next-style: 13 cached layers, 1 KV head per rank, head_dim 256 (triton_attn / flashinfer
    customize_spec): per-token-head dtypes add one fp32 scale to K and to V; int4 packs two a byte; nvfp4
    stores head_dim / 2 fp4 bytes + head_dim / 16 fp8 scales for K and for V."""
    def per_token(kv: str) -> int:
        return mf.kv_shape(QWEN_CONFIG, 2, kv, draft=True).bytes_per_token
    assert per_token("fp8_per_token_head") == per_token("int8_per_token_head") == 13 * (2 * 256 + 2 * 4) == 6_760
    assert per_token("int4_per_token_head") == 13 * (2 * 128 + 2 * 4) == 3_432
    assert per_token("nvfp4") == per_token("nvfp4_4over6") == 13 * 2 * (128 + 16) == 3_744
    assert per_token("fp8_e5m2") == per_token("fp8_inc") == 13 * 2 * 256 == 6_656
    assert per_token("float16") == per_token(None) == 13_312


def test_a_layout_model_fit_does_not_know_is_cannot_judge_never_another_dtypes_number(tmp_path):
    for config, kv in ((QWEN_CONFIG, "turboquant_k8v4"), (QWEN_CONFIG, "fp8_ds_mla"), (MLA_CONFIG, "nvfp4"),
                       ({**MLA_CONFIG, "kv_lora_rank": 256}, "fp8_ds_mla")):
        with pytest.raises(UnknownLayout):
            mf.kv_shape(config, 2, kv, draft=True)
    dsk = shipped(tmp_path, "dspark-0731-b12x", kv_cache_dtype="fp8_per_token_head")
    v = checks_fit.model_fit(seen_for(Headers("spark-1", "/snap", MLA_CONFIG, DEEPSEEK_HEADERS, 0),
                                      {"spark-1": SPARK_TOTAL, "spark-2": SPARK_TOTAL}), dsk)
    assert v.status is Status.WARN and set(v.cells) == {"spark-1", "spark-2"}
    assert all(c.value.startswith("cannot judge the KV cache: kv_cache_dtype fp8_per_token_head") and "MLA" in c.value
               for c in v.cells.values())


@pytest.mark.parametrize("kv", ["auto", "fp8", "fp8_ds_mla", "nvfp4_ds_mla", "fp8_per_token_head",
                                "int4_per_token_head", "nvfp4", "bfloat16"])
def test_the_stand_in_lays_out_each_dtype_as_model_fit_does(kv):
    """Two codes from the same vLLM source: the stand-in's KV line and model-fit's prediction agree."""
    import argparse

    from orchestrator.sim.standin import derived

    args = argparse.Namespace(kv_cache_dtype=kv, tensor_parallel_size=2, pipeline_parallel_size=1)
    for config in (MLA_CONFIG, QWEN_CONFIG, DEEPSEEK_V4_CONFIG):
        try:
            expected = mf.kv_shape(config, 2, kv, draft=True).bytes_per_token
        except UnknownLayout:
            continue  # a dtype this attention does not take
        assert derived.kv_bytes_per_token(args, config, draft=True) == expected, (kv, config["model_type"])


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


def test_fewer_tokens_than_max_model_len_fail_naming_the_rule_and_a_smaller_node_alone(tmp_path):
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
    short = checks_fit.model_fit(seen_for(Headers("spark-1", "/snap", MLA_CONFIG, DEEPSEEK_HEADERS, 0),
                                          {"spark-1": SPARK_TOTAL, "spark-2": SPARK_TOTAL}), dsk)
    # vLLM refuses to start when one max_model_len request does not fit: a failure, not a warning (the generic
    # MLA rule on a V3-shaped model; the recipe's own DeepSeek-V4 is "cannot judge", tested above)
    assert short.status is Status.FAIL and short.failed_nodes() == ["spark-1", "spark-2"]
    assert "1,040,640 tokens" in short.cells["spark-1"].value
    assert "max_num_seqs 12 at full length needs 12,582,912: the rest queue" in short.cells["spark-1"].value
    assert "max_num_seqs 12 at full length needs 49,152: fits" in v.cells["spark-1"].value
    assert "rule kv-tokens-below-max-model-len" in short.fix and "lower vllm.max_model_len" in short.fix
    assert "To serve at least one request with the model's max seq len" in short.fix  # vLLM's own words


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
