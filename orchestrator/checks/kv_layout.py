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

Not the generic layers: DeepSeek-V4 (`own_layout`, `deepseek_v4`). vLLM 0.33.0 builds its cache in the
model's own attention, several specs per layer, none of them one latent per token; `deepseek_v4` sums
them as vLLM's start-up check does (v1/core/kv_cache_planning.py check_enough_kv_cache_memory: the sum of
every layer spec's `max_memory_usage_bytes` for one max_model_len request) — see `deepseek_v4`.
"""

from __future__ import annotations

from dataclasses import dataclass
from math import ceil

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


# --- DeepSeek-V4 on a DGX Spark (vLLM 0.33.0) ----------------------------------------------------------
# On capability 12.x both DSv4 attention classes (nvidia/model.py _select_dsv4_attn_cls: FlashInfer SM120,
# or FlashMLA when asked) keep `use_fp8_ds_mla_layout = True`, so attention.py _resolve_dsv4_kv_cache_dtype
# turns auto and every fp8* into fp8_ds_mla and refuses the rest at start.
V4_FP8 = ("auto", "fp8", "fp8_e4m3", "fp8_e5m2", "fp8_ds_mla")
V4_STATE = 584  # attention.py:880 / sparse_swa.py:84: 448 fp8 NoPE + 128 B bf16 RoPE + 8 B UE8M0 scales
V4_ALIGN = 576  # every fp8_ds_mla page rounds up to 576 B (kv_cache_interface.py _apply_alignment_padding)
V4_SWA_BLOCK = 64  # DeepseekV4SWACache block_size (sparse_swa.py:82)
V4_INDEX_ROW = 128 + 128 // 128 * 4  # fp8 indexer K: 128 fp8 + one fp32 scale (attention.py:1024-1029)
V4_HEAD = 512  # head_dim of the attention (the compressors' states are fp32 of 2 x coff x head_dim)


class RefusedLayout(UnknownLayout):
    """vLLM refuses this KV dtype for this model at start: a failure, not a "cannot judge"."""


def _pad(n: int) -> int:
    return -(-n // V4_ALIGN) * V4_ALIGN


@dataclass(frozen=True)
class V4Part:
    """One kind of cache spec: `layers` layers of pages of `page` bytes; a growing part takes a page per
    `block` tokens of the request, a sliding one (`window` > 0) at most window - 1 + in-flight tokens
    plus one page (SlidingWindowSpec.max_admission_blocks_per_request)."""
    name: str
    layers: int
    page: int
    block: int
    window: int = 0

    def pages(self, max_len: int, in_flight: int) -> int:
        if not self.window:
            return -(-max_len // self.block)
        return -(-min(self.window - 1 + in_flight, max_len) // self.block) + 1

    def bytes(self, max_len: int, in_flight: int) -> int:
        return self.layers * self.pages(max_len, in_flight) * self.page


@dataclass(frozen=True)
class V4Layout:
    """DeepSeek-V4's cache for one max_model_len request, the same on every rank (max_tp_shards=1)."""
    parts: tuple[V4Part, ...]
    max_len: int
    in_flight: int  # vllm_config.max_in_flight_tokens: concurrent batches x max_num_batched_tokens

    kind = "deepseek-v4"

    @property
    def request_bytes(self) -> int:
        return sum(p.bytes(self.max_len, self.in_flight) for p in self.parts)

    @property
    def bytes_per_token(self) -> int:
        """One max_model_len request's bytes per token of it (the sliding parts spread over it)."""
        return ceil(self.request_bytes / self.max_len)

    def tokens(self, kv_memory: int, _block_size: int) -> int:
        """vLLM's `GPU KV cache size`: concurrency (pool / one request) x max_model_len
        (kv_cache_utils.get_kv_cache_capacity), here by bytes: vLLM's grouping may pad pages further."""
        return kv_memory * self.max_len // self.request_bytes

    def formula(self) -> str:
        return " + ".join(f"{p.name}: {p.layers} x {p.pages(self.max_len, self.in_flight):,} pages x {p.page:,} B"
                          for p in self.parts)


def deepseek_v4(cfg: dict, kv_cache_dtype: str | None, block_size: int, max_len: int, in_flight: int,
                draft_layers: int) -> V4Layout:
    """The specs vLLM 0.33.0 gives a DeepSeek-V4 model on a Spark, per layer i of ratio
    r = compress_rates[layer_types[i]] (0: sliding only; a draft layer is always 1: attention.py:236-241):
    - every layer: DeepseekV4SWACache (sparse_swa.py:120-145), 64-token pages of 584 B, padded: sliding;
    - r > 1: the compressed MLA state (attention.py:860-882), block_size / r states of 584 B a page,
      and the compressor's fp32 state (compressor.py:179-190, state_dim 2 x coff x 512, coff 2 when r is 4,
      pages of 4 (r 4) or 8 (r 128) rows, window coff x r): sliding;
    - r = 4: the Lightning indexer's K cache (attention.py:911-925, block_size / 4 rows of 132 B) and its
      compressor's state (head 128): sliding.
    UnknownLayout when the config does not say what this needs; RefusedLayout for a dtype vLLM refuses."""
    dtype = kv_cache_dtype or "auto"
    if dtype not in V4_FP8:
        raise RefusedLayout(f"kv_cache_dtype {dtype}: vLLM 0.33.0 refuses it for DeepSeek-V4 on a Spark (\"DeepseekV4 "
                            f"fp8_ds_mla layout only supports fp8 kv-cache, got {dtype}\", models/deepseek_v4/"
                            "attention.py:111-116); use fp8_ds_mla (what auto and fp8 become there)")
    types, rates = cfg.get("layer_types"), cfg.get("compress_rates")
    window = cfg.get("sliding_window")
    if not (isinstance(types, list) and isinstance(rates, dict) and isinstance(window, int) and window > 0):
        raise UnknownLayout(f"model_type {cfg.get('model_type')}: config.json has no layer_types, compress_rates and "
                            "sliding_window, which vLLM 0.33.0 lays DeepSeek-V4's cache out by")
    if cfg.get("head_dim", V4_HEAD) != V4_HEAD or cfg.get("index_head_dim", 128) != 128:
        raise UnknownLayout("DeepSeek-V4's fp8_ds_mla layout is made for head_dim 512 and index_head_dim 128")
    ratios = [max(1, int(rates.get(t) or 0)) for t in types]
    if any(r not in (1, 4, 128) for r in ratios):
        raise UnknownLayout(f"compress ratios {sorted(set(ratios))}: vLLM 0.33.0's compressor takes 4 and 128")
    c4, c128 = ratios.count(4), ratios.count(128)
    parts = [V4Part("sliding window", len(ratios) + draft_layers, _pad(V4_SWA_BLOCK * V4_STATE), V4_SWA_BLOCK, window)]
    for r, n in ((4, c4), (128, c128)):
        if n:
            coff, rows = (2, 4) if r == 4 else (1, 8)
            parts.append(V4Part(f"C{r} states", n, _pad(block_size // r * V4_STATE), block_size))
            parts.append(V4Part(f"C{r} compressor", n, _pad(rows * 2 * coff * V4_HEAD * 4), rows, coff * r))
    if c4:
        parts.append(V4Part("C4 indexer K", c4, _pad(block_size // 4 * V4_INDEX_ROW), block_size))
        parts.append(V4Part("C4 indexer compressor", c4, _pad(4 * 2 * 2 * 128 * 4), 4, 8))
    return V4Layout(tuple(parts), max_len, in_flight)
