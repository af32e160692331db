"""Does the model fit? Weights per rank, KV-cache bytes per token, and the tokens vLLM's budget leaves.

Pure arithmetic on what a snapshot says about itself (safetensors headers: dtype, shape and byte extent of
every tensor; config.json: the attention shape), so it is known in seconds, before a 20-70 minute load.
vLLM's own accounting (v1 gpu_worker.determine_available_memory, kv_cache_utils):

    KV memory = gpu_memory_utilization x total - (weights + activation peak + non-torch memory + CUDA graphs)
    tokens    = KV memory // (KV bytes per token x block_size) x block_size

DeepSeek-V4 has no per-token rule: its caches are summed for one max_model_len request as vLLM's start-up
check sums them (kv_layout.deepseek_v4), and tokens = KV memory / that x max_model_len.

The weights are read exactly; the other three are what vLLM measures in its profiling run, estimated
here (their constants below), so the prediction is close, not exact: `up` records the engine's own line
next to it.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass
from enum import StrEnum

from . import kv_layout
from .kv_layout import Layout, UnknownLayout, V4Layout

GIB = 1 << 30

# Estimates of what vLLM's profiling run measures (the weights are not estimated).
NON_TORCH_BYTES = int(0.5 * GIB)  # CUDA context, NCCL and cuBLAS workspaces outside torch's allocator
CUDA_GRAPH_BYTES = int(0.5 * GIB)  # captured graphs' pools (0 with enforce_eager)
ACTIVATION_BYTES_PER_HIDDEN = 2 * 16  # bf16 activations x ~16 live buffers per batched token in the peak
LOGIT_BYTES = 4 * 2  # fp32 logits and their softmax per sampled sequence x vocab

# vLLM's defaults when the recipe leaves them unset
DEFAULT_BLOCK_SIZE = 16
DEFAULT_MAX_NUM_SEQS = 256
DEFAULT_MAX_BATCHED_TOKENS = 8192

DRAFT = re.compile(r"(^|\.)(mtp|mtp_layers|draft|draft_model|eagle|medusa|nextn)(\.|_|$)")
LAYER = re.compile(r"(^|\.)layers\.(\d+)\.")


class FitError(ValueError):
    """config.json or the headers do not say what the arithmetic needs (named)."""


class FitState(StrEnum):
    """One node's answer, the same for preflight's model-fit and `fit`."""
    FITS = "fits"
    WEIGHTS_SHORT = "weights-do-not-fit"  # no room left for any KV cache: the load fails after the whole load
    KV_SHORT = "kv-tokens-below-max-model-len"  # vLLM refuses to start: not one full-length request fits
    KV_UNJUDGED = "kv-not-judged"  # a KV layout model-fit does not know: the weights are judged, the KV is not
    KV_REFUSED = "kv-dtype-refused"  # vLLM refuses this KV dtype for this model at start (kv_unknown quotes it)

    @property
    def fails(self) -> bool:
        return self in (FitState.WEIGHTS_SHORT, FitState.KV_SHORT, FitState.KV_REFUSED)


class KvKind(StrEnum):
    ATTENTION = "attention"  # K and V per KV head per layer, the KV heads split across TP ranks
    MLA = "mla"  # one compressed latent (kv_lora_rank + rope dims) per layer, whole on every rank
    HYBRID = "hybrid"  # linear-attention layers keep a fixed state per sequence: only attention layers grow
    DEEPSEEK_V4 = "deepseek-v4"  # compressed states, sliding windows and indexer caches (kv_layout.deepseek_v4)


def text_config(config: dict) -> dict:
    """Multimodal configs keep the language model's numbers under text_config (or llm/language_config)."""
    for key in ("text_config", "llm_config", "language_config"):
        if isinstance(config.get(key), dict):
            return {**config, **config[key]}
    return config


def _int(cfg: dict, *keys: str) -> int | None:
    for k in keys:
        if isinstance(cfg.get(k), int) and not isinstance(cfg.get(k), bool) and cfg[k] > 0:
            return cfg[k]
    return None


def _need(cfg: dict, *keys: str) -> int:
    value = _int(cfg, *keys)
    if value is None:
        raise FitError(f"config.json has no {' or '.join(keys)}")
    return value


@dataclass(frozen=True)
class KvShape:
    kind: KvKind
    layers: int  # layers that hold a per-token cache (target + draft)
    per_layer: Layout  # one token in one layer on one rank, as vLLM lays out the dtype (checks/kv_layout.py)

    @property
    def bytes_per_token(self) -> int:
        return self.layers * self.per_layer.bytes

    def formula(self) -> str:
        return f"{self.layers} layers x {self.per_layer.how}"

    def tokens(self, kv_memory: int, block_size: int) -> int:
        """Whole blocks of block_size tokens, as vLLM's `GPU KV cache size` line counts them."""
        return kv_memory // (self.bytes_per_token * block_size) * block_size


def attention_layers(cfg: dict) -> tuple[int, bool]:
    """(layers with a per-token KV cache, hybrid?): Qwen3-Next-style models name each layer's type
    (`layer_types`) or put full attention every `full_attention_interval` layers; the rest are linear
    attention (a fixed state per sequence, not per token)."""
    layers = _need(cfg, "num_hidden_layers", "n_layers", "num_layers")
    types = cfg.get("layer_types")
    if isinstance(types, list) and types:
        attn = sum(1 for t in types if "attention" in str(t) and "linear" not in str(t))
        return attn, attn < len(types)
    interval = _int(cfg, "full_attention_interval")
    if interval and interval > 1:
        return layers // interval, True
    return layers, False


def draft_layers(cfg: dict) -> int:
    """Decoder layers an in-checkpoint MTP head adds (vLLM gives them their own KV cache)."""
    return _int(cfg, "num_nextn_predict_layers", "mtp_num_hidden_layers", "num_mtp_layers") or 0


def kv_shape(config: dict, tp: int, kv_cache_dtype: str | None, draft: bool) -> KvShape:
    """What one token costs in one rank's KV cache, as vLLM lays it out for this architecture and dtype
    (UnknownLayout: a dtype whose layout model-fit does not know)."""
    cfg = text_config(config)
    if why := kv_layout.own_layout(cfg):  # DeepSeek-V4: compressed states and sliding windows, no per-token rule
        raise UnknownLayout(why)
    layers, hybrid = attention_layers(cfg)
    layers += draft_layers(cfg) if draft else 0
    if _int(cfg, "kv_lora_rank"):  # DeepSeek MLA: the latent and the rope key, not split by TP
        rope = _int(cfg, "qk_rope_head_dim") or 0
        return KvShape(KvKind.MLA, layers, kv_layout.mla(kv_cache_dtype, cfg, _need(cfg, "kv_lora_rank"), rope))
    heads = _need(cfg, "num_attention_heads", "n_heads")
    kv_heads = _int(cfg, "num_key_value_heads", "num_kv_heads") or heads
    head_dim = _int(cfg, "head_dim") or _need(cfg, "hidden_size") // heads
    per_rank = max(1, kv_heads // tp)  # fewer KV heads than ranks: vLLM replicates one per rank
    return KvShape(KvKind.HYBRID if hybrid else KvKind.ATTENTION, layers,
                   kv_layout.attention(kv_cache_dtype, cfg, per_rank, head_dim))


DSPARK_LAYERS = 3  # models/deepseek_v4/nvidia/dspark.py:106: n_mtp_layers, else 3


def v4_shape(cfg: dict, s: Settings, max_len: int, batched: int) -> V4Layout:
    """DeepSeek-V4's cache for one max_model_len request (kv_layout.deepseek_v4). In flight: one batch per
    concurrent step, two with async scheduling at PP 1 (config/vllm.py max_concurrent_batches), vLLM's
    default unless the recipe turns it off; the draft's layers: DSpark's own, else the checkpoint's MTP."""
    if s.block_size is None:
        raise UnknownLayout("DeepSeek-V4's block size is picked by its attention backend at start (the recipe "
                            "sets no block-size)")
    draft = 0
    if s.draft:
        draft = (_int(cfg, "n_mtp_layers") or DSPARK_LAYERS) if s.spec_method == "dspark" else draft_layers(cfg)
    in_flight = (1 if s.async_scheduling is False else 2) * batched
    return kv_layout.deepseek_v4(cfg, s.kv_cache_dtype, s.block_size, max_len, in_flight, draft)


def _extent(name: str, entry: dict) -> int:
    try:
        start, end = entry["data_offsets"]
        return int(end) - int(start)
    except (KeyError, TypeError, ValueError):
        raise FitError(f"tensor {name}: not a safetensors entry: {entry!r:.120}") from None


def is_draft(name: str, cfg: dict) -> bool:
    """An MTP/draft head's tensor (named so, or DeepSeek-style layers numbered after the last decoder layer)."""
    if DRAFT.search(name):
        return True
    layer, layers = LAYER.search(name), _int(cfg, "num_hidden_layers")
    return bool(layer and layers and draft_layers(cfg) and int(layer.group(2)) >= layers)


def weights_per_rank(headers: dict[str, dict], config: dict, tp: int, draft: bool) -> int:
    """Bytes one rank loads: matrices split across the TP ranks, 1-D tensors (norms, biases, scales)
    whole on every rank; the draft head only when speculative decoding loads it from this checkpoint."""
    cfg = text_config(config)
    split = whole = 0
    for shard in headers.values():
        for name, entry in shard.items():
            if name == "__metadata__":
                continue
            size = _extent(name, entry)
            if not draft and is_draft(name, cfg):
                continue
            if len(entry.get("shape") or []) <= 1:
                whole += size
            else:
                split += size
    return whole + -(-split // tp)


@dataclass(frozen=True)
class Settings:
    """The recipe's numbers that the budget depends on."""
    tp: int
    utilization: float
    kv_cache_dtype: str | None
    max_model_len: int | None  # None: the model's max_position_embeddings
    max_num_seqs: int | None
    max_batched_tokens: int | None
    block_size: int | None
    enforce_eager: bool
    draft: bool  # speculative decoding loads an in-checkpoint draft head
    spec_method: str | None = None  # speculative_config.method (DSpark drafts with its own layers)
    async_scheduling: bool | None = None  # None: vLLM's default (on, unless an option it cannot take)


@dataclass(frozen=True)
class Fit:
    """One node's budget, as vLLM will split it. Bytes throughout."""
    mem_total: int
    utilization: float
    weights: int
    activation: int
    non_torch: int
    cuda_graphs: int
    kv: KvShape | V4Layout | None  # None: model-fit cannot judge the KV cache (kv_unknown says why)
    block_size: int
    max_model_len: int
    max_num_seqs: int | None
    kv_unknown: str = ""
    kv_refused: bool = False  # kv_unknown is vLLM's refusal at start, not a layout model-fit does not know

    @property
    def budget(self) -> int:
        return int(self.utilization * self.mem_total)

    @property
    def kv_memory(self) -> int:
        return self.budget - self.weights - self.activation - self.non_torch - self.cuda_graphs

    @property
    def tokens(self) -> int:
        """Tokens the KV cache holds (whole blocks), as vLLM's `GPU KV cache size` line counts them
        (UnknownLayout when the KV cache cannot be judged)."""
        if self.kv is None:
            raise UnknownLayout(self.kv_unknown)
        return self.kv.tokens(max(0, self.kv_memory), self.block_size)

    @property
    def weights_fit(self) -> bool:
        return self.kv_memory > 0

    @property
    def concurrency(self) -> float:
        return self.tokens / self.max_model_len

    @property
    def state(self) -> FitState:
        if not self.weights_fit:
            return FitState.WEIGHTS_SHORT
        if self.kv is None:  # never a number computed for another layout
            return FitState.KV_REFUSED if self.kv_refused else FitState.KV_UNJUDGED
        return FitState.KV_SHORT if self.tokens < self.max_model_len else FitState.FITS

    def as_dict(self) -> dict:
        out = {k: v for k, v in asdict(self).items() if k != "kv"}
        if self.kv is None:
            return {**out, "budget": self.budget, "kv_memory": self.kv_memory}
        return {**out, "kv_kind": str(self.kv.kind), "kv_bytes_per_token": self.kv.bytes_per_token,
                "budget": self.budget, "kv_memory": self.kv_memory, "tokens": self.tokens,
                **({"kv_request_bytes": self.kv.request_bytes} if isinstance(self.kv, V4Layout) else {})}


def fit(headers: dict[str, dict], config: dict, mem_total: int, s: Settings, kv_optional: bool = False) -> Fit:
    """One node's budget. A KV layout model-fit does not know raises UnknownLayout, or with `kv_optional`
    gives a Fit without a KV shape (kv None, kv_unknown the reason) whose weights are still judged."""
    cfg = text_config(config)
    max_len = s.max_model_len or _need(cfg, "max_position_embeddings")
    seqs = s.max_num_seqs or DEFAULT_MAX_NUM_SEQS
    batched = s.max_batched_tokens or DEFAULT_MAX_BATCHED_TOKENS
    hidden = _need(cfg, "hidden_size")
    vocab = _int(cfg, "vocab_size") or 0
    activation = batched * hidden * ACTIVATION_BYTES_PER_HIDDEN + seqs * vocab * LOGIT_BYTES
    refused = False
    try:
        kv, unknown = (v4_shape(cfg, s, max_len, batched) if kv_layout.own_layout(cfg) else
                       kv_shape(config, s.tp, s.kv_cache_dtype, s.draft)), ""
    except UnknownLayout as exc:  # RefusedLayout too: a failure of its own state, never a number
        if not kv_optional:
            raise
        kv, unknown, refused = None, str(exc), isinstance(exc, kv_layout.RefusedLayout)
    return Fit(mem_total, s.utilization, weights_per_rank(headers, config, s.tp, s.draft), activation,
               NON_TORCH_BYTES, 0 if s.enforce_eager else CUDA_GRAPH_BYTES, kv,
               s.block_size or DEFAULT_BLOCK_SIZE, max_len, s.max_num_seqs, unknown, refused)


def fixes(short: list[str], tight: list[str], unjudged: list[str], tp: int,
          refused: tuple[list[str], str] = ([], "")) -> list[str]:
    """What to change, for the nodes in each failing state (preflight's model-fit and `fit` say the same);
    `refused`: the nodes whose KV dtype vLLM refuses, and its words."""
    out = []
    if refused[0]:
        out.append(f"{', '.join(refused[0])}: rule kv-dtype-refused: {refused[1]}")
    if short:
        out.append(f"{', '.join(short)}: the weights do not fit vLLM's share (loading would fail after the "
                   f"whole load): raise vllm.tensor_parallel_size (now {tp}) over more nodes, pick a smaller "
                   "quantization, or raise vllm.gpu_memory_utilization within the memory-headroom check")
    if tight:
        out.append(f"{', '.join(tight)}: rule kv-tokens-below-max-model-len: fewer KV tokens fit than "
                   "max_model_len, so vLLM refuses to start (\"To serve at least one request with the model's "
                   "max seq len (...), (... GiB KV cache is needed, which is larger than the available KV cache "
                   "memory\"): lower vllm.max_model_len, use a smaller vllm.kv_cache_dtype (fp8), or raise "
                   "vllm.gpu_memory_utilization")
    if unjudged:
        out.append(f"{', '.join(unjudged)}: model-fit cannot predict this KV cache; `up` records the engine's "
                   "own `GPU KV cache size` line, and vLLM itself refuses a max_model_len that does not fit")
    return out


def gib(n: float) -> str:
    return f"{n / GIB:.1f} GiB"


def describe(f: Fit) -> str:
    """The numbers behind the verdict, in one line."""
    text = (f"weights {gib(f.weights)}/rank + activations {gib(f.activation)} + non-torch {gib(f.non_torch)} + "
            f"graphs {gib(f.cuda_graphs)} of {f.utilization:g} x {gib(f.mem_total)} = {gib(f.budget)}")
    if not f.weights_fit:
        return f"{text}: {gib(-f.kv_memory)} short, no room for a KV cache"
    if f.kv is None and f.kv_refused:
        return f"{text} leaves {gib(f.kv_memory)} KV"
    if f.kv is None:
        return f"{text} leaves {gib(f.kv_memory)} KV; tokens that fit not judged ({f.kv_unknown})"
    if isinstance(f.kv, V4Layout):
        text += (f" leaves {gib(f.kv_memory)} KV; one {f.max_model_len:,}-token request needs "
                 f"{gib(f.kv.request_bytes)} ({f.kv.kind}, fp8_ds_mla: {f.kv.formula()}) -> ~{f.tokens:,} tokens = "
                 f"{f.concurrency:.2f}x max_model_len")
    else:
        text += (f" leaves {gib(f.kv_memory)} KV; {f.kv.bytes_per_token:,} B/token ({f.kv.kind}: {f.kv.formula()}) "
                 f"-> {f.tokens:,} tokens = {f.concurrency:.2f}x max_model_len {f.max_model_len:,}")
    if f.max_num_seqs:
        need = f.max_num_seqs * f.max_model_len
        text += (f"; max_num_seqs {f.max_num_seqs} at full length needs {need:,}: "
                 + ("fits" if f.tokens >= need else "the rest queue"))
    return text
