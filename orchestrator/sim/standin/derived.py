"""Numbers vLLM derives from the flags and the model: CUDA graph sizes, KV cache capacity, worker names."""
from __future__ import annotations

import glob
import json
import math
import os
import random
import re
import struct
from dataclasses import dataclass

from .base import SimError

_DRAFT = re.compile(r"(^|\.)(mtp|mtp_layers|draft|draft_model|eagle|medusa|nextn)(\.|_|$)")


def cudagraph_profile(args, spec_k: int, perturb: bool) -> tuple[str, float]:
    """Capture sizes as vLLM derives them from max-num-seqs/batched tokens/spec tokens.

    Returns the 'PIECEWISE=.. (largest=..), FULL=..' text and the estimated GiB. `perturb` models
    a rank that disagrees (other image/flags/JIT build): it drops its largest capture size.
    """
    q = 1 + spec_k
    limit = max(q, min(args.max_num_seqs * q * 2, 512, args.max_num_batched_tokens))
    base = [1, 2, 4] + list(range(8, 256, 8)) + list(range(256, 513, 16))
    sizes = sorted({math.ceil(s / q) * q for s in base} & set(range(1, limit + 1)))
    if perturb:
        sizes = sizes[:-1] if len(sizes) > 1 else sizes + [sizes[-1] * 2]
    full = [s for s in sizes if s <= args.max_num_seqs * q] or sizes[:1]
    text = (f"PIECEWISE={len(sizes)} (largest={sizes[-1]}), FULL={len(full)} (largest={full[-1]})")
    return text, 0.12 + sum(sizes) * 0.00002 + sum(full) * 0.00004


def checkpoint_bytes(model_dir: str, hf: dict, tp: int, draft: bool) -> int:
    """Bytes this rank loads, from the shards' own safetensors headers: matrices split across the TP
    ranks, 1-D tensors whole on each; the MTP/draft tensors only when speculative decoding loads them."""
    split = whole = 0
    layers = int(hf.get("num_hidden_layers") or 0)
    for path in sorted(glob.glob(os.path.join(model_dir, "*.safetensors"))):
        with open(path, "rb") as fh:
            raw = fh.read(8)
            n = struct.unpack("<Q", raw)[0] if len(raw) == 8 else 0
            try:
                header = json.loads(fh.read(n)) if n >= 2 else None
            except ValueError:
                header = None
        if not isinstance(header, dict):  # what safetensors raises, wrapped by vLLM's loader
            raise SimError("safetensors_rust.SafetensorError: Error while deserializing header: "
                           f"{'HeaderTooSmall' if n < 2 else 'InvalidHeaderDeserialization'}")
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            layer = re.search(r"(^|\.)layers\.(\d+)\.", name)
            is_draft = bool(_DRAFT.search(name)) or bool(layer and hf.get("num_nextn_predict_layers")
                                                         and int(layer.group(2)) >= layers)
            if is_draft and not draft:
                continue
            size = entry["data_offsets"][1] - entry["data_offsets"][0]
            if len(entry["shape"]) <= 1:
                whole += size
            else:
                split += size
    return whole + -(-split // tp)


def kv_bytes_per_token(args, hf: dict, draft: bool) -> int:
    """One rank's KV cache per token: K and V for its share of the KV heads (one at least) in every
    attention layer, or the MLA latent whole on every rank; linear-attention layers hold none."""
    cfg = {**hf, **hf["text_config"]} if isinstance(hf.get("text_config"), dict) else hf
    layers = int(cfg.get("num_hidden_layers") or 36) // args.pipeline_parallel_size
    if isinstance(cfg.get("layer_types"), list):
        layers = sum(1 for t in cfg["layer_types"] if "attention" in t and "linear" not in t)
    elif int(cfg.get("full_attention_interval") or 1) > 1:
        layers //= int(cfg["full_attention_interval"])
    if draft:
        layers += int(cfg.get("num_nextn_predict_layers") or cfg.get("mtp_num_hidden_layers") or 0)
    dtype = args.kv_cache_dtype
    if dtype in ("fp8", "fp8_e4m3", "fp8_e5m2", "fp8_inc"):
        size = 1
    elif dtype == "auto" and str(cfg.get("torch_dtype")) == "float32":
        size = 4
    else:
        size = 2
    if cfg.get("kv_lora_rank"):  # vLLM 0.33.0's packed ds_mla rows (mla_attention.py state_content_bytes)
        packed = {"fp8_ds_mla": 656, "nvfp4_ds_mla": 352}.get(dtype)
        return layers * (packed or (int(cfg["kv_lora_rank"]) + int(cfg.get("qk_rope_head_dim") or 0)) * size)
    heads = int(cfg.get("num_attention_heads") or 64)
    kv_heads = max(1, int(cfg.get("num_key_value_heads") or heads) // args.tensor_parallel_size)
    head_dim = int(cfg.get("head_dim") or (int(cfg.get("hidden_size") or heads * 64) // heads))
    if dtype.endswith("_per_token_head"):  # K and V each followed by an fp32 scale (int4: two values a byte)
        side = head_dim // 2 if dtype.startswith("int4") else head_dim
        return layers * kv_heads * (2 * side + 8)
    if dtype.startswith("nvfp4"):  # fp4 data and an fp8 scale per 16 values, for K and for V
        return 2 * layers * kv_heads * (head_dim // 2 + head_dim // 16)
    return 2 * layers * kv_heads * head_dim * size


@dataclass
class Profile:
    """What vLLM's profiling run finds on one rank (bytes), and the KV cache it then allocates."""
    total: int
    weights: int
    activation: int
    non_torch: int
    graphs: int
    per_token: int
    block_size: int

    @property
    def available(self) -> int:
        return self.total - self.weights - self.activation - self.non_torch - self.graphs

    @property
    def tokens(self) -> int:
        return max(0, self.available) // (self.per_token * self.block_size) * self.block_size


def profile(args, hf: dict, weights: int, total_bytes: int, graph_gib: float, draft: bool,
            rng: random.Random | None = None) -> Profile:
    """vLLM's memory profile: the utilization budget less the loaded weights, the activation peak of a
    dummy batch of max_num_batched_tokens, the memory outside torch and the CUDA graphs. A real engine's
    peak and non-torch figures vary run to run with allocator state: so do these."""
    rng = rng or random.Random()
    cfg = {**hf, **hf["text_config"]} if isinstance(hf.get("text_config"), dict) else hf
    hidden, vocab = int(cfg.get("hidden_size") or 4096), int(cfg.get("vocab_size") or 0)
    activation = int(args.max_num_batched_tokens * hidden * 2 * rng.uniform(12, 20)
                     + args.max_num_seqs * vocab * 4 * rng.uniform(1.5, 2.5) + rng.uniform(0.1, 0.3) * 2**30)
    non_torch = int(rng.uniform(0.3, 0.8) * 2**30)
    budget = int(total_bytes * args.gpu_memory_utilization)
    return Profile(budget, weights, activation, non_torch, int(graph_gib * 2**30),
                   kv_bytes_per_token(args, hf, draft), args.block_size)


def worker_name(args, world: int) -> str:
    """Worker process label; with one rank the uni executor runs the worker inside EngineCore."""
    if world == 1 and args.distributed_executor_backend != "mp":
        return "EngineCore_DP0"
    tp, pp, rank = args.tensor_parallel_size, args.pipeline_parallel_size, args.node_rank
    name = "Worker"
    if pp > 1:
        name += f"_PP{rank // tp}"
    if tp > 1:
        name += f"_TP{rank % tp}"
    return name


