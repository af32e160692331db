"""The ceiling (note 18) from real safetensors headers: the fake model's, read by the node script.

The header reader is the constant bash script bench runs over SSH; here it runs under the local bash on
a real HF-cache layout (fake_model.write_hf_cache), so the bytes it reads are measured, not assumed.
"""

from __future__ import annotations

import struct
from pathlib import Path

import pytest
from fakes import run_bash

from orchestrator.bench import ceiling as ce
from orchestrator.checks import safetensors_headers as hd
from orchestrator.sim import fake_model as fm


def test_ceiling_of_the_fake_model_equals_the_hand_computation(hf_cache):
    cache = hf_cache.root
    h = hd.parse("spark-1", run_bash(hd.SCRIPT, str(cache), fm.REPO_ID, "main"))
    assert len(h.headers) == 3 and h.config["num_experts_per_tok"] == 2
    b = ce.breakdown(h.headers, h.config)
    # By hand, BF16 = 2 bytes. Per decoder layer: 2 norms 64 + q 64x64 + k 32x64 + v 32x64 + o 64x64
    # + router 4x64 = 12672 elements; 4 experts of (64x64 gate_up + 64x32 down) = 24576, of which a token
    # reads 2/4. Embedding 256x64, final norm 64, lm_head 256x64. Vision tower and the MTP head: excluded.
    dense_layer = 64 + 64 * 64 + 32 * 64 + 32 * 64 + 64 * 64 + 64 + 4 * 64
    experts_layer = 4 * (64 * 64 + 64 * 32)
    elements = 2 * dense_layer + 2 * experts_layer * 2 / 4 + 256 * 64 + 64 + 256 * 64
    assert b.bytes_per_token == 2 * elements == 165504
    vision = 2 * (32 * 588 + 32 + 96 * 32 + 32 * 32 + 64 * 32)
    mtp = 2 * (64 * 128 + 64 + 64 + dense_layer + experts_layer + 64)
    assert b.parts[ce.Part.VISION].stored == vision
    assert b.parts[ce.Part.DRAFT].stored == mtp
    assert b.parts[ce.Part.ROUTED_EXPERTS].stored == 2 * 2 * experts_layer
    top = ce.ceiling(b, nodes=2, bandwidth=273e9)
    assert top.tokens_per_s == pytest.approx(2 * 273e9 / 165504)


def test_only_headers_are_read_a_few_kb_not_the_files(hf_cache):
    cache, meta = hf_cache.root, hf_cache.meta
    h = hd.parse("spark-1", run_bash(hd.SCRIPT, str(cache), fm.REPO_ID, "main"))
    snap = Path(h.snapshot)
    expected = (snap / "config.json").stat().st_size
    for f in sorted(snap.glob("*.safetensors")):
        with f.open("rb") as fh:
            (n,) = struct.unpack("<Q", fh.read(8))
        expected += 8 + n
    assert h.bytes_read == expected
    shards = sum(v["size"] for k, v in meta["files"].items() if k.endswith(".safetensors"))
    assert h.bytes_read < 16_000 < shards  # a few KB of headers, against the shards' full size


def test_missing_snapshot_and_broken_header_are_named(hf_cache, tmp_path):
    cache = hf_cache.root
    with pytest.raises(hd.HeaderError, match="no refs/v9"):
        hd.parse("spark-2", run_bash(hd.SCRIPT, str(cache), fm.REPO_ID, "v9"))
    plain = tmp_path / "model"
    plain.mkdir()
    (plain / "config.json").write_text("{}")
    (plain / "model.safetensors").write_bytes(struct.pack("<Q", 10**12) + b"{}")
    with pytest.raises(hd.HeaderError, match="spark-2: not safetensors: model.safetensors: header length"):
        hd.parse("spark-2", run_bash(hd.SCRIPT, str(cache), str(plain), "main"))


def _entry(dtype: str, shape: list[int], offset: int = 0) -> dict:
    n = ce.DTYPE_BYTES[dtype]
    for d in shape:
        n *= d
    return {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + int(n)]}


def test_moe_shared_experts_always_and_deepseek_mtp_layers_excluded():
    config = {"num_hidden_layers": 1, "num_nextn_predict_layers": 1, "n_routed_experts": 8,
              "num_experts_per_tok": 2}
    header = {
        "model.layers.0.self_attn.q_proj.weight": _entry("BF16", [8, 8]),  # 128 B
        "model.layers.0.mlp.shared_experts.down_proj.weight": _entry("BF16", [8, 8]),  # 128 B, always
        "model.layers.0.mlp.experts.0.down_proj.weight": _entry("BF16", [8, 8]),
        "model.layers.0.mlp.experts.1.down_proj.weight": _entry("BF16", [8, 8]),  # 256 B routed x 2/8
        "model.layers.1.self_attn.q_proj.weight": _entry("BF16", [8, 8]),  # layer 1 >= 1 layer: MTP
        "model.vision_tower.blocks.0.weight": _entry("BF16", [8, 8]),
    }
    b = ce.breakdown({"x.safetensors": header}, config)
    assert b.bytes_per_token == 128 + 128 + 256 * 2 / 8
    assert b.parts[ce.Part.DRAFT].tensors == 1 and b.parts[ce.Part.VISION].tensors == 1


def test_hypotheses_refute_what_a_measured_speed_exceeds():
    header = {"w": _entry("U8", [1000, 500])}  # 4-bit packed: 1e6 parameters in 500 kB
    b = ce.breakdown({"x": header}, {"quantization_config": {"quant_method": "mxfp4"}})
    assert b.params_read() == 1_000_000
    rows = {r["hypothesis"]: r for r in ce.hypotheses(b, nodes=1, bandwidth=1e9, measured=1500.0)}
    assert rows["weights read at 4-bit"]["ceiling_tps"] == pytest.approx(2000.0)
    assert rows["weights read at 4-bit"]["verdict"] == "possible"
    assert rows["dequantized to FP8"]["verdict"] == "refuted"  # ceiling 1000 < 1500 measured
    assert rows["dequantized to BF16"]["verdict"] == "refuted"
