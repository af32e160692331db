"""A checkpoint too large to hold, for the Hub stand-in: real safetensors headers and config.json for a
dense attention model of any size, its weights zeros made only for the byte ranges asked (hub.SparseFile).

`fit` must answer for a 160 GB model from its headers alone; this is such a model, and the stand-in's byte
counts show what a header read cost.
"""

from __future__ import annotations

import hashlib
import json
import struct

from .hub import HubRepo, SparseFile

HIDDEN = 5120
LAYERS = 64
HEADS = 64
KV_HEADS = 8
HEAD_DIM = 128
VOCAB = 151936
SHARDS = 4
BF16 = 2


def config() -> dict:
    return {"architectures": ["Qwen3ForCausalLM"], "model_type": "qwen3", "hidden_size": HIDDEN,
            "num_hidden_layers": LAYERS, "num_attention_heads": HEADS, "num_key_value_heads": KV_HEADS,
            "head_dim": HEAD_DIM, "vocab_size": VOCAB, "max_position_embeddings": 40960, "torch_dtype": "bfloat16"}


def _layer(i: int, inter: int) -> list[tuple[str, list[int]]]:
    p = f"model.layers.{i}"
    return [(f"{p}.input_layernorm.weight", [HIDDEN]), (f"{p}.post_attention_layernorm.weight", [HIDDEN]),
            (f"{p}.self_attn.q_proj.weight", [HEADS * HEAD_DIM, HIDDEN]),
            (f"{p}.self_attn.k_proj.weight", [KV_HEADS * HEAD_DIM, HIDDEN]),
            (f"{p}.self_attn.v_proj.weight", [KV_HEADS * HEAD_DIM, HIDDEN]),
            (f"{p}.self_attn.o_proj.weight", [HIDDEN, HEADS * HEAD_DIM]),
            (f"{p}.mlp.gate_proj.weight", [inter, HIDDEN]), (f"{p}.mlp.up_proj.weight", [inter, HIDDEN]),
            (f"{p}.mlp.down_proj.weight", [HIDDEN, inter])]


def tensors(per_rank_gib: float, tp: int = 2) -> list[list[tuple[str, list[int]]]]:
    """(name, shape) per shard, all BF16, the MLP width chosen so one of `tp` ranks loads ~per_rank_gib."""
    attn = (2 * HEADS * HEAD_DIM + 2 * KV_HEADS * HEAD_DIM) * HIDDEN
    fixed = 2 * VOCAB * HIDDEN + LAYERS * attn  # embed + lm_head + attention matrices, in elements
    inter = max(1, int((per_rank_gib * (1 << 30) * tp / BF16 - fixed) / (3 * HIDDEN * LAYERS)))
    layers = [_layer(i, inter) for i in range(LAYERS)]
    per = -(-LAYERS // SHARDS)
    shards = [[t for layer in layers[s * per:(s + 1) * per] for t in layer] for s in range(SHARDS)]
    shards[0].insert(0, ("model.embed_tokens.weight", [VOCAB, HIDDEN]))
    shards[-1] += [("model.norm.weight", [HIDDEN]), ("lm_head.weight", [VOCAB, HIDDEN])]
    return shards


def _shard(names: list[tuple[str, list[int]]]) -> SparseFile:
    header: dict = {"__metadata__": {"format": "pt"}}
    offset = 0
    for name, shape in names:
        n = BF16
        for d in shape:
            n *= d
        header[name] = {"dtype": "BF16", "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)
    prefix = struct.pack("<Q", len(raw)) + raw
    return SparseFile(prefix, len(prefix) + offset)


def repo(repo_id: str, per_rank_gib: float, tp: int = 2) -> HubRepo:
    """The Hub stand-in's repo of such a model (its commit derived from its headers)."""
    files: dict = {}
    weight_map = {}
    for i, names in enumerate(tensors(per_rank_gib, tp), start=1):
        fname = f"model-{i:05d}-of-{SHARDS:05d}.safetensors"
        files[fname] = _shard(names)
        weight_map.update({name: fname for name, _ in names})
    files["config.json"] = (json.dumps(config(), indent=2) + "\n").encode()
    total = sum(f.size - len(f.prefix) for f in files.values() if isinstance(f, SparseFile))
    files["model.safetensors.index.json"] = json.dumps(
        {"metadata": {"total_size": total}, "weight_map": weight_map}, indent=2).encode()
    commit = hashlib.sha1(b"".join(f.prefix if isinstance(f, SparseFile) else f for f in files.values())).hexdigest()
    return HubRepo(repo_id, commit, files)
