"""A tiny fake MoE model laid out exactly like a Hugging Face hub cache.

``<hf_cache>/hub/models--sim--tiny-moe/``
  ``blobs/<name>``                         the bytes; name = sha256 (weights, LFS) or git blob sha1 (others)
  ``snapshots/<rev>/<file>``               relative symlinks ``../../blobs/<name>``
  ``refs/main``                            ``<rev>`` (40 hex, derived from the content)

The three ``.safetensors`` shards carry real safetensors headers (u64 LE header length + JSON header with
``__metadata__`` and ``{dtype, shape, data_offsets}`` per tensor, then zero bytes), with a vision tower,
an MTP head, attention, a router and experts, so code that sums bytes-per-token from headers has
something honest to read. Everything is < 1 MB.
"""

from __future__ import annotations

import hashlib
import io
import json
import struct
import tarfile
import tempfile
from pathlib import Path

REPO_ID = "sim/tiny-moe"
CACHE_DIR_NAME = "models--" + REPO_ID.replace("/", "--")
HF_CACHE_DIR = "/srv/hf-cache"  # on each simulated node

HIDDEN = 64
LAYERS = 2
EXPERTS = 4
EXPERTS_PER_TOK = 2
MOE_INTER = 32
VOCAB = 256
VISION_HIDDEN = 32
SHARDS = 3

_DTYPE_BYTES = {"BF16": 2, "F16": 2, "F32": 4, "U8": 1, "I8": 1, "F8_E4M3": 1}


def model_config(variant: str = "") -> dict:
    cfg = {
        "architectures": ["SimMoeForCausalLM"],
        "model_type": "sim_moe",
        "hidden_size": HIDDEN,
        "intermediate_size": 4 * HIDDEN,
        "moe_intermediate_size": MOE_INTER,
        "num_hidden_layers": LAYERS,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "num_experts": EXPERTS,
        "num_experts_per_tok": EXPERTS_PER_TOK,
        "max_position_embeddings": 4096,
        "vocab_size": VOCAB,
        "torch_dtype": "bfloat16",
        "vision_config": {"hidden_size": VISION_HIDDEN, "depth": 1},
    }
    if variant:
        cfg["sim_variant"] = variant  # a different variant is a different revision
    return cfg


def _tensors() -> list[list[tuple[str, str, list[int]]]]:
    """(name, dtype, shape) per shard."""
    head = HIDDEN // 4
    kv = 2 * head

    def layer(prefix: str) -> list[tuple[str, str, list[int]]]:
        t = [
            (f"{prefix}.input_layernorm.weight", "BF16", [HIDDEN]),
            (f"{prefix}.self_attn.q_proj.weight", "BF16", [HIDDEN, HIDDEN]),
            (f"{prefix}.self_attn.k_proj.weight", "BF16", [kv, HIDDEN]),
            (f"{prefix}.self_attn.v_proj.weight", "BF16", [kv, HIDDEN]),
            (f"{prefix}.self_attn.o_proj.weight", "BF16", [HIDDEN, HIDDEN]),
            (f"{prefix}.post_attention_layernorm.weight", "BF16", [HIDDEN]),
            (f"{prefix}.mlp.gate.weight", "BF16", [EXPERTS, HIDDEN]),  # the router
        ]
        for e in range(EXPERTS):
            t.append((f"{prefix}.mlp.experts.{e}.gate_up_proj.weight", "BF16", [2 * MOE_INTER, HIDDEN]))
            t.append((f"{prefix}.mlp.experts.{e}.down_proj.weight", "BF16", [HIDDEN, MOE_INTER]))
        return t

    vision = [
        ("model.visual.patch_embed.proj.weight", "BF16", [VISION_HIDDEN, 3 * 14 * 14]),
        ("model.visual.blocks.0.norm1.weight", "BF16", [VISION_HIDDEN]),
        ("model.visual.blocks.0.attn.qkv.weight", "BF16", [3 * VISION_HIDDEN, VISION_HIDDEN]),
        ("model.visual.blocks.0.attn.proj.weight", "BF16", [VISION_HIDDEN, VISION_HIDDEN]),
        ("model.visual.merger.mlp.0.weight", "BF16", [HIDDEN, VISION_HIDDEN]),
    ]
    mtp = [
        ("mtp.fc.weight", "BF16", [HIDDEN, 2 * HIDDEN]),
        ("mtp.pre_fc_norm_embedding.weight", "BF16", [HIDDEN]),
        ("mtp.pre_fc_norm_hidden.weight", "BF16", [HIDDEN]),
        *layer("mtp.layers.0"),
        ("mtp.norm.weight", "BF16", [HIDDEN]),
    ]
    return [
        [("model.embed_tokens.weight", "BF16", [VOCAB, HIDDEN]), *vision],
        layer("model.layers.0"),
        [*layer("model.layers.1"), ("model.norm.weight", "BF16", [HIDDEN]),
         ("lm_head.weight", "BF16", [VOCAB, HIDDEN]), *mtp],
    ]


def safetensors_bytes(tensors: list[tuple[str, str, list[int]]], metadata: dict[str, str]) -> bytes:
    """Serialize zero-filled tensors in the safetensors format."""
    header: dict = {"__metadata__": metadata}
    offset = 0
    for name, dtype, shape in tensors:
        n = _DTYPE_BYTES[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + n]}
        offset += n
    raw = json.dumps(header, separators=(",", ":")).encode()
    raw += b" " * (-len(raw) % 8)  # the reference writer pads the header to 8 bytes
    return struct.pack("<Q", len(raw)) + raw + bytes(offset)


def read_safetensors_header(data: bytes) -> dict:
    """Parse the JSON header of a safetensors file's bytes."""
    (n,) = struct.unpack("<Q", data[:8])
    return json.loads(data[8:8 + n])


def model_files(variant: str = "") -> dict[str, bytes]:
    """File name -> content of the snapshot."""
    files: dict[str, bytes] = {}
    weight_map: dict[str, str] = {}
    total = 0
    for i, tensors in enumerate(_tensors(), start=1):
        fname = f"model-{i:05d}-of-{SHARDS:05d}.safetensors"
        files[fname] = safetensors_bytes(tensors, {"format": "pt"})
        for name, dtype, shape in tensors:
            weight_map[name] = fname
            n = _DTYPE_BYTES[dtype]
            for d in shape:
                n *= d
            total += n
    files["config.json"] = (json.dumps(model_config(variant), indent=2, sort_keys=True) + "\n").encode()
    index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
    files["model.safetensors.index.json"] = (json.dumps(index, indent=2) + "\n").encode()
    return files


def blob_name(name: str, data: bytes) -> str:
    """The blob's file name as huggingface_hub writes it: an LFS file (the weights) under its sha256, a
    regular git file (config.json, the index) under its git blob id, sha1(b"blob <size>\0" + data)."""
    if name.endswith(".safetensors"):
        return hashlib.sha256(data).hexdigest()
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()


def model_metadata(variant: str = "") -> dict:
    """repo id, revision and per-file blob name + size: what a node's cache can be compared by."""
    files = model_files(variant)
    blobs = {name: {"blob": blob_name(name, data), "size": len(data)}
             for name, data in sorted(files.items())}
    rev = hashlib.sha1(json.dumps(blobs, sort_keys=True).encode()).hexdigest()
    return {"repo_id": REPO_ID, "revision": rev, "cache_dir": CACHE_DIR_NAME, "files": blobs,
            "total_bytes": sum(b["size"] for b in blobs.values())}


def write_hf_cache(hf_cache: Path, variant: str = "") -> dict:
    """Write the model into ``<hf_cache>/hub/`` in the real HF cache layout; return its metadata."""
    meta = model_metadata(variant)
    files = model_files(variant)
    root = Path(hf_cache) / "hub" / CACHE_DIR_NAME
    (root / "blobs").mkdir(parents=True, exist_ok=True)
    snap = root / "snapshots" / meta["revision"]
    snap.mkdir(parents=True, exist_ok=True)
    (root / "refs").mkdir(exist_ok=True)
    for name, data in files.items():
        blob = meta["files"][name]["blob"]
        (root / "blobs" / blob).write_bytes(data)
        link = snap / name
        if link.is_symlink() or link.exists():
            link.unlink()
        link.symlink_to(Path("..") / ".." / "blobs" / blob)
    (root / "refs" / "main").write_text(meta["revision"])
    return meta


def hf_cache_tar(variant: str = "") -> tuple[bytes, dict]:
    """A tar (relative paths, symlinks kept) of a fresh HF cache with the model, and its metadata."""
    with tempfile.TemporaryDirectory(prefix="sd-sim-model-") as tmp:
        meta = write_hf_cache(Path(tmp), variant)
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w") as tar:
            tar.add(Path(tmp) / "hub", arcname="hub")
        return buf.getvalue(), meta


def install_into_container(container, hf_cache: str = HF_CACHE_DIR, variant: str = "") -> dict:
    """Stream the model into a node container's HF cache with put_archive (docker-py Container)."""
    data, meta = hf_cache_tar(variant)
    code, out = container.exec_run(["mkdir", "-p", hf_cache])
    if code != 0:
        raise RuntimeError(f"mkdir {hf_cache} in {container.name} failed: {out!r}")
    if not container.put_archive(hf_cache, data):
        raise RuntimeError(f"put_archive of the fake model into {container.name}:{hf_cache} failed")
    return meta
