"""What the engine really ran, per rank, read from its own start-up lines: a fingerprint.

Field notes: a `sed` that matched nothing made two "different" experiments identical, and `auto` chose
another MoE backend without a word; only the engine's own lines tell what ran. This module is the pure
part: the lines (formats in tests/data/vllm/log_formats.json, from vLLM 0.33.0's wheel) parsed into one
typed value per rank, the ranks judged against each other, the head's `non-default args` judged against
the argv the plan rendered, and the pre-deploy key `bench --compare` refuses identical A and B by.

vLLM 0.33.0 logs `non-default args` and its engine config (KV cache dtype, speculative config) on the
head only (the API server's setup_server, entrypoints/launchers/launcher.py:368 -> common/startup.py:96;
v1/engine/core.py:140): a headless rank (entrypoints/cli/serve.py run_headless) logs neither. Every rank's
worker logs its attention backend (platforms/cuda.py:448, :509), MoE backend (each quantization's
fused_moe/oracle/*.py) and CUDA graph profile: those are compared.
"""
from __future__ import annotations

import ast
import hashlib
import json
import re
from dataclasses import asdict, dataclass, field

from ..vllm_table import options_table as table
from ..vllm_table.argtypes import resolve

NON_DEFAULT = re.compile(r"non-default args: (\{.*\})\s*$")
ATTENTION = re.compile(r"Using (\w+) attention backend out of potential backends: ")  # cuda.py:509 (auto)
ATTENTION_SELECTED = re.compile(r"Using (?:AttentionBackendEnum\.)?([A-Z][A-Z0-9_]+) backend\.$")  # cuda.py:448
# every quantization's oracle (fused_moe/oracle/*.py: fp8, nvfp4, mxfp4, unquantized, ...), quoted or not
MOE = re.compile(r"Using '?([\w.-]+)'? (?:\w+ )*MoE backend")
GRAPHS = re.compile(r"Profiling CUDA graph memory: (.*)$")
GRAPH_MODE = re.compile(r"\b([A-Z_]+)=\d+ \(largest=")
ENGINE = re.compile(r"Initializing a V1 LLM engine \(v[^)]*\) with config: (.*)$")
KV_DTYPE = re.compile(r"\bkv_cache_dtype=([^,\s]+)")
SPECULATIVE = re.compile(r"\bspeculative_config=(None|SpeculativeConfig\([^)]*\))")
BLOCK_SET = re.compile(r"Setting attention block size to (\d+) tokens")

COMPARED = ("attention_backend", "moe_backend", "cudagraph_modes", "block_size")  # every rank logs these
SHOWN = ("attention_backend", "moe_backend", "cudagraph_modes", "kv_cache_dtype")  # the short form


@dataclass(frozen=True)
class RankEngine:
    """One rank's resolved engine settings, each None when its line was not seen."""

    rank: int
    node: str
    attention_backend: str | None = None
    moe_backend: str | None = None
    cudagraph_modes: str | None = None  # "FULL+PIECEWISE" from the profile line; None: no graphs profiled
    block_size: int | None = None  # only when the engine changed it ("Setting attention block size to N")
    kv_cache_dtype: str | None = None  # head only (the engine config line)
    speculative: str | None = None  # head only: SpeculativeConfig(method=..., model=..., num_spec_tokens=...)
    non_default: dict | None = None  # head only: the engine's own `non-default args`


@dataclass(frozen=True)
class Fingerprint:
    ranks: tuple[RankEngine, ...]
    digest: str = field(default="")

    def as_dict(self) -> dict:
        return {"digest": self.digest, "ranks": [asdict(r) for r in self.ranks]}


def _value(node: ast.AST):
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        return ast.unparse(node)  # an object's repr (a config dataclass): kept as its text


def parse_args_dict(text: str) -> dict | None:
    """`{'model_tag': 'x', 'port': 8000, ...}` as vLLM prints it; a value that is no literal is kept as text."""
    try:
        tree = ast.parse(text, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(tree, ast.Dict):
        return None
    return {str(_value(k)): _value(v) for k, v in zip(tree.keys, tree.values) if k is not None}


def rank_engine(rank: int, node: str, lines: list[str]) -> RankEngine:
    """Pure: one rank's log lines -> what it resolved (the last of each line wins: a restart logs again)."""
    got: dict = {}
    for line in lines:
        line = line.rstrip()
        if m := NON_DEFAULT.search(line):
            got["non_default"] = parse_args_dict(m.group(1))
        elif m := ATTENTION.search(line) or ATTENTION_SELECTED.search(line):
            got["attention_backend"] = m.group(1)
        elif m := MOE.search(line):
            got["moe_backend"] = m.group(1)
        elif m := GRAPHS.search(line):
            got["cudagraph_modes"] = "+".join(sorted(set(GRAPH_MODE.findall(m.group(1))))) or None
        elif m := BLOCK_SET.search(line):
            got["block_size"] = int(m.group(1))
        elif m := ENGINE.search(line):
            config = m.group(1)
            if k := KV_DTYPE.search(config):
                got["kv_cache_dtype"] = k.group(1)
            if s := SPECULATIVE.search(config):
                got["speculative"] = None if s.group(1) == "None" else s.group(1)
    return RankEngine(rank, node, **got)


def _digest(ranks: tuple[RankEngine, ...]) -> str:
    """Node names aside: the same engine configuration on another cluster has the same digest."""
    body = [{k: v for k, v in asdict(r).items() if k != "node"} for r in sorted(ranks, key=lambda r: r.rank)]
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:12]


def fingerprint(logs: dict[str, list[str]], ranks: dict[str, int]) -> Fingerprint:
    """Pure: node -> its log lines, node -> its rank -> the fingerprint of every rank."""
    parsed = tuple(rank_engine(ranks[node], node, logs.get(node, [])) for node in sorted(ranks, key=ranks.get))
    return Fingerprint(parsed, _digest(parsed))


def disagreements(fp: Fingerprint) -> list[str]:
    """Each resolved setting the ranks do not share: "attention_backend: rank 0 (spark-1) resolved
    'FLASH_ATTN', rank 1 (spark-2) resolved 'TRITON_ATTN'" (no line on one rank is a disagreement too)."""
    out = []
    for key in COMPARED:
        values = {getattr(r, key) for r in fp.ranks}
        if len(values) > 1:
            head = fp.ranks[0]
            expected = getattr(head, key)
            seen = ", ".join(f"rank {r.rank} ({r.node}) resolved {_said(getattr(r, key))}"
                             for r in fp.ranks[1:] if getattr(r, key) != expected)
            out.append(f"{key}: the ranks disagree: expected {_said(expected)} (rank {head.rank}, {head.node}), "
                       f"seen {seen}")
    return out


def deviating(fp: Fingerprint) -> list[str]:
    """The nodes whose resolved settings differ from rank 0's: where the failure is named."""
    if not fp.ranks:
        return []
    head = fp.ranks[0]
    return [r.node for r in fp.ranks[1:] if any(getattr(r, k) != getattr(head, k) for k in COMPARED)]


def _said(value) -> str:
    return "(no line)" if value is None else repr(value)


# -- the rendered argv, as the engine would report it ---------------------------------------------------
_BY_STRING = {s: row for row in table.OPTIONS for s in (*row[0], *row[1])}
_POSITIONAL = next(row for row in table.OPTIONS if not row[0])


def _convert(row, text: str):
    convert = resolve(row[5], row[2], row[6])
    try:
        return convert(text) if convert is not None else text
    except Exception:  # noqa: BLE001 - the engine would refuse it; the flag checks say so before this
        return text


def _is_default(row, value) -> bool:
    default = row[8]
    return value == default or (default is not None and str(value) == str(default))


def expected_args(model: str, serve_args: list[str]) -> dict:
    """Pure: the `non-default args` vLLM 0.33.0 would log for `vllm serve MODEL ARGS` (its parser's dests
    and converted values, a value equal to the option's default left out). A flag the table lacks, or a
    dotted JSON key, is left to the flag checks (config/flag_table) and not predicted here."""
    out: dict = {}
    if not _is_default(_POSITIONAL, model):
        out[_POSITIONAL[2]] = model
    i = 0
    while i < len(serve_args):
        token = serve_args[i]
        i += 1
        flag, eq, attached = token.partition("=")
        row = _BY_STRING.get(flag)
        if row is None:
            continue
        strings, hidden, dest, _g, action, _t, _c, nargs, _d, _m = row
        if action == "store_true":
            value = True
        elif action == "enable_disable":
            value = flag == strings[0]
        else:
            texts = [attached] if eq else []
            while not eq and i < len(serve_args) and not serve_args[i].startswith("--"):
                texts.append(serve_args[i])
                i += 1
                if nargs not in ("+", "*"):
                    break
            value = [_convert(row, t) for t in texts] if nargs in ("+", "*") else (
                _convert(row, texts[0]) if texts else None)
            if action == "append":
                value = [*out.get(dest, []), value]
        if _is_default(row, value):
            out.pop(dest, None)
        else:
            out[dest] = value
    return out


def _same(a, b) -> bool:
    return a == b or str(a) == str(b)


def args_differences(expected: dict, seen: dict | None) -> list[str]:
    """Each rendered setting the engine did not take: "max_num_seqs: expected 8 (rendered), seen 16". Keys the
    engine adds itself (e.g. `api_server_count`) are recorded in the fingerprint, not judged."""
    if seen is None:
        return ["non-default args: expected the engine's `non-default args` line, seen none (or not parsed)"]
    out = []
    for key, value in expected.items():
        if key not in seen:
            out.append(f"{key}: expected {value!r} (rendered), seen (not among the engine's non-default args)")
        elif not _same(seen[key], value):
            out.append(f"{key}: expected {value!r} (rendered), seen {seen[key]!r}")
    return out


def short(record: dict | None) -> str:
    """`3f2a9c1e0b7d attn FLASH_ATTN, moe B12X_MXFP4_MXFP8, graphs FULL+PIECEWISE, kv fp8` for status/history."""
    if not record or not record.get("ranks"):
        return "-"
    head = record["ranks"][0]
    names = {"attention_backend": "attn", "moe_backend": "moe", "cudagraph_modes": "graphs", "kv_cache_dtype": "kv"}
    bits = [f"{names[k]} {head.get(k)}" for k in SHOWN if head.get(k) is not None]
    return f"{record.get('digest', '?')} " + ", ".join(bits)


# -- before anything is deployed: what the engine will be given ----------------------------------------
# Environment variables the engine (or a library it loads, or the stand-in: SIM_) may read. A variable
# outside these reaches no code of the engine's: two plans differing only in one start the same engine.
ENGINE_ENV_PREFIXES = ("VLLM_", "NCCL_", "CUDA", "NVIDIA_", "TORCH", "PYTORCH_", "TRITON_", "FLASHINFER_",
                       "DG_", "HF_", "HUGGING", "TRANSFORMERS_", "TOKENIZERS_", "SAFETENSORS_", "GLOO_", "UCX_",
                       "NVSHMEM_", "OMP_", "MKL_", "CUBLAS", "CUDNN", "LD_", "PYTHON", "MASTER_", "SIM_")


def engine_env(env: list[tuple[str, str]] | tuple) -> dict[str, str]:
    return {k: v for k, v in env if k.upper().startswith(ENGINE_ENV_PREFIXES)}


def predicted_key(image_id: str, ranks: list[tuple[str, list[str], list[tuple[str, str]], list[str]]]) -> str:
    """The pre-deploy key: the image ID and, per rank, the non-default args the engine would log, the
    environment it reads and the mounts (an overlay is code). Two plans with the same key give the engine
    the same input: `bench --compare` refuses them (docs/bench.md). `ranks`: (model, serve args, env,
    mounts) in rank order."""
    body = {"image": image_id, "ranks": [{"args": expected_args(model, list(args)), "env": engine_env(env),
                                          "mounts": sorted(mounts)} for model, args, env, mounts in ranks]}
    return hashlib.sha256(json.dumps(body, sort_keys=True, default=str).encode()).hexdigest()[:12]
