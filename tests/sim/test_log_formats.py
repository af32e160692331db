"""Issue 36: the log lines spark-deploy reads, held to the format strings in vLLM 0.33.0's own code
(tests/data/vllm/log_formats.json, written by scripts/vllm-log-formats from the wheel): every line the
stand-in prints for them matches a real format, and every pattern the tool (and the shipped recipes)
reads them with matches a line rendered from that format."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from ruamel.yaml import YAML
from test_vllm_sim import free_port, hermetic_env, make_model, serve_args, spawn, started  # noqa: F401 (fixture)

from orchestrator.deploy import after_ready, kv_report
from orchestrator.facts import fingerprint
from orchestrator.deploy.signatures import SIGNATURES_BY_NAME
from orchestrator.sim.standin.base import RINGBUFFER_MSG

REPO = Path(__file__).resolve().parents[2]
DATA = json.loads((REPO / "tests" / "data" / "vllm" / "log_formats.json").read_text())
FORMATS: dict[str, list[dict]] = DATA["formats"]

# What a real engine fills each format with (from vllm-reference.md's captured lines), in order.
EXAMPLES = {
    "kv-cache-size": ("GPU", "372,529", "32,768", 11.37),
    "kv-cache-memory": ("12.34",),
    "cuda-graph-profile": ("PIECEWISE=51 (largest=512), FULL=35 (largest=256)",),
    "mxfp4-moe-backend": ("B12X_MXFP4_MXFP8",),
    "worker-died": ("Worker_TP1", -6),
    "engine-init-failed": ("{'EngineCore_DP0': 1}",),
    "ringbuffer-stall": (60,),
    "non-default-args": ("{'model': 'sim/tiny'}",),
    "attention-backend": ("FLASH_ATTN", "['FLASH_ATTN', 'TRITON_ATTN']"),
    "attention-backend-selected": ("AttentionBackendEnum.TRITON_ATTN",),
    "engine-config": ("0.33.0", "model='sim/tiny', speculative_config=SpeculativeConfig(method='mtp', "
                                "model='sim/tiny', num_spec_tokens=3), tokenizer='sim/tiny', dtype=torch.bfloat16, "
                                "kv_cache_dtype=fp8, compilation_config={'mode': 3}"),
    "block-size-set": (256, 64),
    "moe-backend": ("FLASHINFER_CUTLASS", "['FLASHINFER_CUTLASS', 'TRITON']"),
}


def regex(entry: dict) -> re.Pattern:
    """A format string as a regular expression: each %-conversion or f-string field is a value."""
    if entry["style"] == "fstring":
        parts = entry["format"].split("{}")
        return re.compile("(.+?)".join(re.escape(p) for p in parts) + "$")
    pieces = re.split(r"(%[-#0 +]*\d*(?:\.\d+)?[sdrfx]|%%)", entry["format"])
    out = "".join("%" if p == "%%" else "(.+?)" if p.startswith("%") else re.escape(p) for p in pieces)
    return re.compile(out + "$")


CONVERSION = re.compile(r"%[-#0 +]*\d*(?:\.\d+)?[sdrfx]")


def rendered(name: str) -> list[str]:
    """Each of the name's formats filled with the example values, as vLLM would print it."""
    out = []
    for entry in FORMATS[name]:
        values = EXAMPLES[name][:len(CONVERSION.findall(entry["format"])) or None]
        if entry["style"] == "fstring":
            parts = entry["format"].split("{}")
            out.append("".join(p + (str(values[i]) if i < len(parts) - 1 else "") for i, p in enumerate(parts)))
        else:  # a format without a conversion is printed as it is
            out.append(entry["format"] % values if CONVERSION.search(entry["format"]) else entry["format"])
    return out


def _recipe_patterns(name: str) -> dict[str, str]:
    for path in (REPO / "recipes" / f"{name}.yaml", REPO / "orchestrator" / "sim" / "recipes" / f"{name}.yaml"):
        if path.is_file():
            expect = YAML(typ="safe").load(path.read_text())["expect"]
            return {e["name"]: e["pattern"] for e in expect.get("lines", []) + expect.get("identical", [])}
    raise FileNotFoundError(name)


def test_the_data_is_vllm_0_33_0s_and_has_every_line_the_tool_reads():
    assert DATA["vllm_version"] == "0.33.0"
    assert set(FORMATS) == set(EXAMPLES) | {"shards"} and all(FORMATS.values())
    assert all(e["file"].startswith("vllm/") and e["line"] > 0 for hits in FORMATS.values() for e in hits)


TOOL_PATTERNS = [
    ("kv-cache-size", after_ready.KV_SIZE), ("kv-cache-size", kv_report.SIZE), ("kv-cache-size", kv_report.CONCURRENCY),
    ("kv-cache-memory", after_ready.KV_MEMORY),
    ("worker-died", SIGNATURES_BY_NAME["worker-died"].pattern),
    ("engine-init-failed", SIGNATURES_BY_NAME["engine-init-failed"].pattern),
    ("ringbuffer-stall", SIGNATURES_BY_NAME["ringbuffer-stall"].pattern),
    ("non-default-args", fingerprint.NON_DEFAULT), ("attention-backend", fingerprint.ATTENTION),
    ("attention-backend-selected", fingerprint.ATTENTION_SELECTED), ("mxfp4-moe-backend", fingerprint.MOE),
    ("moe-backend", fingerprint.MOE),
    ("cuda-graph-profile", fingerprint.GRAPHS), ("engine-config", fingerprint.ENGINE),
    ("engine-config", fingerprint.KV_DTYPE), ("engine-config", fingerprint.SPECULATIVE),
    ("block-size-set", fingerprint.BLOCK_SET),
    *[(line, re.compile(pattern)) for recipe in ("dspark-0731-b12x", "qwen38-flash-next-mtp", "sim-tiny")
      for name, pattern in _recipe_patterns(recipe).items()
      for line in {"moe-backend": "mxfp4-moe-backend", "cuda-graph-profile": "cuda-graph-profile"}.get(name, "").split()
      if line],
]


@pytest.mark.parametrize("name, pattern", TOOL_PATTERNS, ids=[f"{n}:{p.pattern[:30]}" for n, p in TOOL_PATTERNS])
def test_the_tools_patterns_match_the_real_format(name, pattern):
    lines = rendered(name)
    assert any(pattern.search(line) for line in lines), f"{pattern.pattern!r} matches none of {lines}"


def test_every_rank_reads_its_moe_backend_from_each_oracles_line():
    """Every rank's worker logs the MoE backend its quantization's oracle chose (fused_moe/oracle/*.py), in one
    of these formats, quoted or not: the fingerprint reads the backend from each, so ranks are compared by it
    whatever the checkpoint's quantization (vLLM 0.33.0 FP8 checkpoints log `Using X Fp8 MoE backend out of
    ...`, unquoted)."""
    names = {e["format"]: fingerprint.rank_engine(1, "spark-2", [f"(Worker_TP1 pid=7) INFO [x.py:1] {line}"]).moe_backend
             for e, line in zip(FORMATS["moe-backend"], rendered("moe-backend"))}
    fixed = {f for f in names if "{}" not in f and "%s" not in f}  # the emulation experts name themselves
    assert {names[f] for f in names if f not in fixed} == {"FLASHINFER_CUTLASS"}, names
    assert {names[f] for f in fixed} == {"Int4EmulationTritonExperts", "Mxfp8EmulationTritonExperts"}


def test_the_standin_prints_its_lines_in_the_real_formats(tmp_path, spawn):  # noqa: F811 (the fixture)
    make_model(tmp_path / "hf", config={"n_predict": 5})
    p = spawn(serve_args(free_port(), "--kv-cache-dtype", "fp8", "--max-model-len", 4096, "--block-size", 256,
                         "--moe-backend", "flashinfer_b12x", "--gpu-memory-utilization", 0.8),
              hermetic_env(tmp_path / "hf"))
    started(p)
    checked = set()
    for name, entries in FORMATS.items():
        needle = re.compile(CONVERSION.sub(r"\\S+", re.escape(DATA["needles"][name]).replace("\\%", "%")))
        lines = [line for line in p.lines if needle.search(line)]
        if name == "shards":  # tqdm's progress after vLLM's description
            assert lines and all(entries[0]["format"] + ":" in line for line in lines)
            continue
        for line in lines:
            assert any(regex(e).search(line) for e in entries), f"{line!r} is not vLLM's {name} format"
            checked.add(name)
    assert {"kv-cache-size", "kv-cache-memory", "cuda-graph-profile", "mxfp4-moe-backend",
            "non-default-args", "attention-backend", "engine-config"} <= checked
    stall = RINGBUFFER_MSG.format(60)
    assert any(regex(e).search(stall) for e in FORMATS["ringbuffer-stall"]), stall


def test_the_standins_rank_backend_fault_prints_vllms_selected_backend_line(tmp_path, spawn):  # noqa: F811
    """SIM_FAULT_RANK_BACKEND=<rank>:<NAME>: that rank resolves NAME, logged as vLLM logs a chosen backend,
    and the fingerprint parser reads it."""
    make_model(tmp_path / "hf")
    p = spawn(serve_args(free_port()), hermetic_env(tmp_path / "hf", SIM_FAULT_RANK_BACKEND="0:TRITON_ATTN"))
    started(p)
    lines = [line for line in p.lines if "AttentionBackendEnum." in line]
    assert lines and all(any(regex(e).search(line) for e in FORMATS["attention-backend-selected"]) for line in lines)
    assert fingerprint.rank_engine(0, "n", p.lines).attention_backend == "TRITON_ATTN"
