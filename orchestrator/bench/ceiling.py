"""The physical ceiling of decoding (note 18): bandwidth / bytes one decoding step reads.

Bytes per token come from the safetensors headers (dtype x shape of every tensor), never from `du`:
a plain text decoding step reads every tensor except the vision tower and the MTP/draft head, and of
a MoE's routed experts only the share a token activates (num_experts_per_tok / n_routed_experts);
shared experts are read by every token. With tensor parallelism over N nodes each node reads 1/N of
it, so the ceiling is N x per-node bandwidth / bytes per token.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field
from enum import StrEnum

GB10_BANDWIDTH = 273e9  # bytes/s, one DGX Spark (GB10) LPDDR5X

DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "F8_E4M3": 1, "F8_E5M2": 1, "F8_E8M0": 1, "F4": 0.5,
               "I16": 2, "U16": 2, "F16": 2, "BF16": 2, "I32": 4, "U32": 4, "F32": 4, "I64": 8, "U64": 8,
               "F64": 8}

VISION = re.compile(r"(^|\.)(visual|vision_tower|vision_model|vision_encoder|image_encoder|"
                    r"multi_modal_projector|mm_projector|vision_projection|audio_tower)(\.|$)")
DRAFT = re.compile(r"(^|\.)(mtp|mtp_layers|draft|draft_model|eagle|medusa|nextn)(\.|_|$)")
ROUTED = re.compile(r"(?<!shared_)experts\.")  # experts.<i>.* and fused experts.gate_up_proj
SHARED = re.compile(r"shared_experts?\.")
EMBED = re.compile(r"(^|\.)(embed_tokens|wte|word_embeddings|tok_embeddings)\.")
LAYER = re.compile(r"(^|\.)layers\.(\d+)\.")


class Part(StrEnum):
    DENSE = "dense"  # attention, norms, router, lm_head: read every step
    EMBEDDING = "embedding"  # counted in full like the rest (a lookup reads one row: listed apart)
    SHARED_EXPERTS = "shared experts"
    ROUTED_EXPERTS = "routed experts"  # counted at the active share
    VISION = "vision tower"  # excluded in text decoding
    DRAFT = "MTP/draft head"  # excluded: the draft head's reads are not the target model's


EXCLUDED = {Part.VISION, Part.DRAFT}


class CeilingError(ValueError):
    """Headers or config that cannot be read as a model."""


def _text_config(config: dict) -> dict:
    """Multimodal configs keep the language model's numbers under text_config / llm_config."""
    for key in ("text_config", "llm_config", "language_config"):
        if isinstance(config.get(key), dict):
            return {**config, **config[key]}
    return config


def expert_share(config: dict) -> tuple[float, int | None, int | None]:
    """(active fraction, experts per token, routed experts); (1.0, None, None) for a dense model."""
    cfg = _text_config(config)
    total = next((cfg[k] for k in ("n_routed_experts", "num_experts", "num_local_experts", "moe_num_experts")
                  if isinstance(cfg.get(k), int) and cfg[k] > 0), None)
    per_tok = next((cfg[k] for k in ("num_experts_per_tok", "moe_topk", "num_activated_experts", "top_k")
                    if isinstance(cfg.get(k), int) and cfg[k] > 0), None)
    if total is None or per_tok is None:
        return 1.0, per_tok, total
    return per_tok / total, per_tok, total


def tensor_bytes(entry: dict, name: str = "?") -> int:
    try:
        size = DTYPE_BYTES[entry["dtype"]] * math.prod(entry["shape"])
        start, end = entry["data_offsets"]
    except (KeyError, TypeError, ValueError):
        raise CeilingError(f"tensor {name}: not a safetensors entry: {entry!r:.120}") from None
    if end - start != size:  # the header's own extent wins over our dtype table (e.g. packed dtypes)
        size = end - start
    return int(size)


def classify(name: str, config: dict) -> Part:
    cfg = _text_config(config)
    if VISION.search(name):
        return Part.VISION
    if DRAFT.search(name):
        return Part.DRAFT
    layers, nextn = cfg.get("num_hidden_layers"), cfg.get("num_nextn_predict_layers")
    layer = LAYER.search(name)
    if layer and isinstance(layers, int) and nextn and int(layer.group(2)) >= layers:
        return Part.DRAFT  # DeepSeek-style MTP layers are numbered after the last decoder layer
    if SHARED.search(name):
        return Part.SHARED_EXPERTS
    if ROUTED.search(name):
        return Part.ROUTED_EXPERTS
    if EMBED.search(name):
        return Part.EMBEDDING
    return Part.DENSE


@dataclass(frozen=True)
class PartBytes:
    tensors: int
    stored: int  # bytes on disk
    params: int  # elements (packed 4-bit counted as two per byte)
    read: float  # bytes a decoding step reads of it


@dataclass
class Breakdown:
    parts: dict[Part, PartBytes] = field(default_factory=dict)
    active_share: float = 1.0
    experts_per_tok: int | None = None
    routed_experts: int | None = None

    @property
    def bytes_per_token(self) -> float:
        return sum(p.read for part, p in self.parts.items() if part not in EXCLUDED)

    @property
    def total_stored(self) -> int:
        return sum(p.stored for p in self.parts.values())

    def params_read(self) -> float:
        """Parameters one step reads (routed experts at the active share)."""
        return sum(p.params * (self.active_share if part is Part.ROUTED_EXPERTS else 1)
                   for part, p in self.parts.items() if part not in EXCLUDED)

    def as_dict(self) -> dict:
        return {"bytes_per_token": self.bytes_per_token, "total_stored_bytes": self.total_stored,
                "active_expert_share": self.active_share, "experts_per_tok": self.experts_per_tok,
                "routed_experts": self.routed_experts,
                "parts": {str(k): {"tensors": v.tensors, "stored_bytes": v.stored, "params": v.params,
                                   "read_bytes": v.read, "excluded": k in EXCLUDED} for k, v in self.parts.items()}}


def _params(entry: dict, packed4: bool) -> int:
    n = math.prod(entry["shape"])
    if packed4 and entry["dtype"] in ("U8", "I8"):
        return 2 * n
    if packed4 and entry["dtype"] in ("I32", "U32"):
        return 8 * n
    return n


def breakdown(headers: dict[str, dict], config: dict) -> Breakdown:
    """Sum the headers ({file: parsed safetensors header}) into the parts a decoding step reads."""
    share, per_tok, total = expert_share(config)
    quant = (_text_config(config).get("quantization_config") or {})
    bits = quant.get("bits") or quant.get("num_bits")
    packed4 = str(quant.get("quant_method", "")).lower() in ("mxfp4", "nvfp4", "awq", "gptq") or bits == 4
    acc: dict[Part, list] = {}
    for fname, header in headers.items():
        if not isinstance(header, dict):
            raise CeilingError(f"{fname}: the header is not a JSON object")
        for name, entry in header.items():
            if name == "__metadata__":
                continue
            part = classify(name, config)
            stored = tensor_bytes(entry, f"{fname}:{name}")
            a = acc.setdefault(part, [0, 0, 0])
            a[0] += 1
            a[1] += stored
            a[2] += _params(entry, packed4)
    if not acc:
        raise CeilingError("no tensors in the headers")
    parts = {part: PartBytes(n, stored, params, stored * (share if part is Part.ROUTED_EXPERTS else 1.0))
             for part, (n, stored, params) in acc.items()}
    return Breakdown(parts, share, per_tok, total)


@dataclass(frozen=True)
class Ceiling:
    bytes_per_token: float
    nodes: int
    bandwidth: float  # bytes/s per node

    @property
    def tokens_per_s(self) -> float:
        return self.nodes * self.bandwidth / self.bytes_per_token


def ceiling(b: Breakdown, nodes: int, bandwidth: float = GB10_BANDWIDTH) -> Ceiling:
    if nodes < 1 or bandwidth <= 0:
        raise CeilingError(f"nodes must be >= 1 and bandwidth > 0 (got {nodes}, {bandwidth})")
    return Ceiling(b.bytes_per_token, nodes, bandwidth)


class Verdict(StrEnum):
    POSSIBLE = "possible"
    REFUTED = "refuted"  # the measured speed is above what this hypothesis allows
    UNMEASURED = "-"


HYPOTHESES = (("as stored (headers)", None), ("weights read at 4-bit", 0.5), ("dequantized to FP8", 1.0),
              ("dequantized to BF16", 2.0))


def hypotheses(b: Breakdown, nodes: int, bandwidth: float, measured: float | None) -> list[dict]:
    """The Qwen report's table: the ceiling if every parameter a step reads were read at that width."""
    rows = []
    for name, width in HYPOTHESES:
        per_tok = b.bytes_per_token if width is None else b.params_read() * width
        top = nodes * bandwidth / per_tok
        verdict = Verdict.UNMEASURED if measured is None else (
            Verdict.REFUTED if measured > top else Verdict.POSSIBLE)
        rows.append({"hypothesis": name, "bytes_per_token": per_tok, "ceiling_tps": top,
                     "of_ceiling": None if measured is None else measured / top, "verdict": str(verdict)})
    return rows
