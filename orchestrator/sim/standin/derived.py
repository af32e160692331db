"""Numbers vLLM derives from the flags and the model: CUDA graph sizes, KV cache capacity, worker names."""
from __future__ import annotations

import math

from .base import GPU_TOTAL_GIB, MODEL_GIB


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


def kv_cache_tokens(args, hf: dict, world: int, graph_gib: float, spec_k: int) -> tuple[float, int]:
    """Available KV GiB and token capacity, from utilisation, dtype and the model's attention shape."""
    weights = MODEL_GIB / world + (1.9 if spec_k else 0.0)
    activations = 0.6 + args.max_num_batched_tokens * 0.00028
    avail = GPU_TOTAL_GIB * args.gpu_memory_utilization - weights - activations - graph_gib
    layers = int(hf.get("num_hidden_layers") or 36) // args.pipeline_parallel_size
    heads = int(hf.get("num_attention_heads") or 64)
    kv_heads = max(1, int(hf.get("num_key_value_heads") or 8) // args.tensor_parallel_size)
    head_dim = int(hf.get("head_dim") or (int(hf.get("hidden_size") or heads * 64) // heads))
    dtype_bytes = 1 if args.kv_cache_dtype.startswith("fp8") else 2
    per_token = 2 * layers * kv_heads * head_dim * dtype_bytes
    tokens = int(max(avail, 0) * 2**30 / per_token) // args.block_size * args.block_size
    return avail, tokens


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


