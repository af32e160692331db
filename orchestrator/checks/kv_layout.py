"""What one token costs in one layer of vLLM's KV cache, per `--kv-cache-dtype`, as vLLM 0.33.0 lays it out.

Each layout below is read from vLLM 0.33.0's own source (the wheel), so model-fit never sizes a cache by
another dtype's rule; a dtype not listed here is "cannot judge" (UnknownLayout), never a guess:

- plain dtypes: (K + V) values x the element size (`AttentionSpec.state_content_size_bytes`,
  v1/kv_cache_interface.py); `auto` stores the model's dtype. fp8, fp8_e4m3, fp8_e5m2, fp8_inc: 1 byte.
- fp8/int8_per_token_head: K and V of head_dim bytes, each followed by one fp32 scale (2 x 4 B);
  int4_per_token_head packs two values a byte (`TritonAttentionBackend.customize_spec`).
- nvfp4, nvfp4_4over6 (the same NVFP4 layout): per K and per V, head_dim / 2 bytes of fp4 data plus
  head_dim / 16 fp8 block scales (`FlashInferBackend.customize_spec`, `nvfp4_kv_cache_full_dim`).
- MLA, plain dtypes: one latent of kv_lora_rank + qk_rope_head_dim values, no V (`MLAAttentionSpec`).
- MLA, fp8_ds_mla: 656 B = 512 fp8 NoPE values + 4 fp32 scales (16 B) + 64 bf16 RoPE values (128 B);
  nvfp4_ds_mla: 352 B = 512 fp4 values (256 B) + 64 fp8 RoPE values + 32 fp8 scales
  (layers/attention/mla_attention.py `state_content_bytes`, v1/attention/backends/mla/flashmla_sparse.py).
  Both need kv_lora_rank 512 and qk_rope_head_dim 64 ("ds_mla layouts require kv_lora_rank == 512").
  The generic MLA layer (layers/attention/mla_attention.py `MLAAttention`) is what DeepSeek V2/V3
  (model_executor/models/deepseek_v2.py) and V3.2 (models/deepseek_v32/attention.py subclasses it) use.

Not the generic layers: DeepSeek-V4 (`own_layout`). vLLM 0.33.0 builds its cache in
models/deepseek_v4/attention.py out of five kinds of spec per model, none of them one latent per token:
a compressed MLA state of 584 B (448 fp8 NoPE + 128 B bf16 RoPE + 8 B scales, `state_content_bytes`,
attention.py:880) per 4 or 128 tokens (`compress_rates[layer_types[i]]`, attention.py:239-240; 1 =
sliding only), a sliding-window cache per layer (`DeepseekV4SWACache`, v1/attention/backends/mla/
sparse_swa.py:120-145, window `sliding_window`, 584 B a token, pages padded to 576 B), the compressors'
state caches (models/deepseek_v4/compressor.py:179), and on the ratio-4 layers a Lightning-Indexer K
cache (132 B fp8 / 68 B MXFP4 per state, attention.py:1021-1029). Sliding windows are capped at
window + in-flight tokens, not max_model_len (v1/kv_cache_interface.py:918-956), and vLLM's grouping
and page-size unification (v1/core/kv_cache_planning.py) decides the blocks a request takes: its
`GPU KV cache size` is num_blocks / Σ groups' blocks per max_model_len request x max_model_len
(v1/core/kv_cache_utils.py:1061-1128). No bytes-per-token number models that, so model-fit does not give one.
"""

from __future__ import annotations

from dataclasses import dataclass

ONE_BYTE = ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc")
TWO_BYTES = ("bfloat16", "float16")
PER_TOKEN_HEAD = ("fp8_per_token_head", "int8_per_token_head", "int4_per_token_head")
NVFP4 = ("nvfp4", "nvfp4_4over6")
DS_MLA = {  # dtype -> (bytes per token per layer, how they add up)
    "fp8_ds_mla": (656, "512 fp8 + 16 B scales + 64 bf16 rope"),
    "nvfp4_ds_mla": (352, "512 fp4 + 64 fp8 rope + 32 fp8 scales"),
}
DS_MLA_GEOMETRY = (512, 64)  # (kv_lora_rank, qk_rope_head_dim) the ds_mla layouts are made for
FP32_SCALE = 4


class UnknownLayout(ValueError):
    """model-fit does not know how vLLM lays out this dtype for this attention: it cannot judge."""


# vLLM 0.33.0's registry (model_executor/models/registry.py:99, 383-389, 676-679, 718) loads these from
# vllm.models.deepseek_v4 / deepseek_v41, whose attention lays the cache out itself (module docstring).
OWN_LAYOUT_MODEL_TYPES = frozenset({"deepseek_v4", "deepseek_v41"})
OWN_LAYOUT_ARCHITECTURES = frozenset({"DeepseekV4ForCausalLM", "DeepseekV4ForConditionalGeneration",
                                      "DeepseekV41ForCausalLM", "DSparkDeepseekV4ForCausalLM",
                                      "DeepSeekV4MTPModel"})
# vLLM's own test for a DeepSeek-V4 config (transformers_utils/deepseek_v4_utils.py get_compress_ratios,
# used by model_arch_config_convertor.py:93 and :323): per-layer compression ratios in config.json.
OWN_LAYOUT_KEYS = ("compress_rates", "compress_ratios")
OWN_LAYOUT_WHY = ("vLLM 0.33.0 lays DeepSeek-V4's cache out in its own attention (compressed states, "
                  "sliding windows), not as one latent per token")


def own_layout(cfg: dict) -> str | None:
    """Why model-fit cannot size this model's KV cache per token (vLLM lays it out in the model's own
    attention module, not the generic attention/MLA specs), or None for the generic layers."""
    architectures = cfg.get("architectures") or []
    if (cfg.get("model_type") in OWN_LAYOUT_MODEL_TYPES
            or any(a in OWN_LAYOUT_ARCHITECTURES for a in architectures if isinstance(a, str))
            or any(cfg.get(k) for k in OWN_LAYOUT_KEYS)):
        return f"model_type {cfg.get('model_type')}: {OWN_LAYOUT_WHY}"
    return None


@dataclass(frozen=True)
class Layout:
    bytes: int  # per token, per layer, on one rank
    how: str  # the sum, for messages


def model_dtype_bytes(cfg: dict) -> int:
    """`auto` stores the model's dtype: float32 four bytes, otherwise two."""
    model = str(cfg.get("torch_dtype") or cfg.get("dtype") or "bfloat16")
    return 4 if model in ("float32", "float") else 2


def _element(kv_cache_dtype: str | None, cfg: dict) -> int | None:
    if kv_cache_dtype in (None, "auto"):
        return model_dtype_bytes(cfg)
    if kv_cache_dtype in ONE_BYTE:
        return 1
    if kv_cache_dtype in TWO_BYTES:
        return 2
    return None


def attention(kv_cache_dtype: str | None, cfg: dict, kv_heads: int, head_dim: int) -> Layout:
    """K and V of `kv_heads` heads (this rank's) of `head_dim` values."""
    element = _element(kv_cache_dtype, cfg)
    if element is not None:
        return Layout(2 * kv_heads * head_dim * element, f"2 x {kv_heads} heads x {head_dim} x {element} B")
    if kv_cache_dtype in PER_TOKEN_HEAD:
        data = head_dim // 2 if kv_cache_dtype == "int4_per_token_head" else head_dim
        return Layout(kv_heads * (2 * data + 2 * FP32_SCALE),
                      f"{kv_heads} heads x 2 x ({data} B + {FP32_SCALE} B scale)")
    if kv_cache_dtype in NVFP4:
        side = head_dim // 2 + head_dim // 16
        return Layout(2 * kv_heads * side, f"2 x {kv_heads} heads x ({head_dim // 2} B fp4 + {head_dim // 16} B scales)")
    raise UnknownLayout(f"kv_cache_dtype {kv_cache_dtype}: its KV layout for attention layers is not known to "
                        "model-fit")


def mla(kv_cache_dtype: str | None, cfg: dict, kv_lora_rank: int, rope: int) -> Layout:
    """One latent per token: kv_lora_rank + rope values, the same on every rank."""
    element = _element(kv_cache_dtype, cfg)
    if element is not None:
        return Layout((kv_lora_rank + rope) * element, f"({kv_lora_rank} + {rope} rope) x {element} B")
    if kv_cache_dtype in DS_MLA:
        if (kv_lora_rank, rope) != DS_MLA_GEOMETRY:
            raise UnknownLayout(f"kv_cache_dtype {kv_cache_dtype} is laid out for kv_lora_rank 512 + rope 64, "
                                f"this model has {kv_lora_rank} + {rope}")
        size, how = DS_MLA[kv_cache_dtype]
        return Layout(size, f"{size} B ({how})")
    raise UnknownLayout(f"kv_cache_dtype {kv_cache_dtype}: its KV layout for MLA layers is not known to model-fit")
