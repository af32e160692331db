"""`bench RECIPE -i INV` on the simulated cluster: the serving release's endpoint, the draft budget from
the recipe, and the ceiling from the head node's safetensors headers read over real SSH (acceptance 4:
the ceiling is the hand computation's, and only a few KB cross the wire, not the files)."""

from __future__ import annotations

import os
import subprocess

import pytest
from bench_helpers import SPARK_DEPLOY, bench_cli
from ruamel.yaml import YAML
import cli_json

pytestmark = pytest.mark.integration

FAKE_MODEL_BYTES_PER_TOKEN = 165504  # tests/unit/test_bench_ceiling.py computes it by hand


def test_bench_of_the_serving_release_with_its_ceiling(served):
    cluster, recipe = served
    code, data, text = bench_cli(str(recipe), "-i", str(cluster.inventory_path), "--profile", "code",
                                 "--shots", "3", "--max-tokens", "120", "--json")
    assert code == 0, text
    t = data["target"]
    assert t["release"] == 1 and t["model"] == "tiny" and t["draft_budget"] == 5 and t["nodes"] == 2
    g = data["groups"][0]
    assert g["kept"] == 3 and g["speculation"]["draft_budget_source"] == "recipe"
    ce = data["ceiling"]
    assert ce["bytes_per_token"] == FAKE_MODEL_BYTES_PER_TOKEN
    assert ce["ceiling_tps"] == pytest.approx(2 * 273e9 / FAKE_MODEL_BYTES_PER_TOKEN)
    assert ce["shards"] == 3 and 1_000 < ce["bytes_read"] < 16_000  # headers only
    assert ce["bytes_read"] < ce["total_stored_bytes"]
    assert ce["parts"]["vision tower"]["excluded"] and ce["parts"]["MTP/draft head"]["excluded"]
    assert [h["verdict"] for h in ce["hypotheses"]] == ["possible"] * 4  # a GB10's bandwidth: far below
    assert "recorded with release 1" in text
    hist = subprocess.run([str(SPARK_DEPLOY), "history", "-i", str(cluster.inventory_path), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert hist.returncode == 0, hist.stderr
    (rec,) = cli_json.result(hist.stdout)
    assert rec["bench"]["headline"]["code"]["decode_tps"] == pytest.approx(g["decode_tps"]["median"])
    assert "shots" not in rec["bench"]["groups"][0]  # the record keeps figures, not every shot
    table = subprocess.run([str(SPARK_DEPLOY), "history", "-i", str(cluster.inventory_path)],
                           capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "250"})
    assert f"code {g['decode_tps']['median']:.1f}" in table.stdout, table.stdout


def test_bench_of_a_recipe_that_does_not_serve_fails(served, tmp_path):
    cluster, recipe = served
    yaml = YAML()
    doc = yaml.load(recipe.read_text())
    doc["name"] = "other"
    other = tmp_path / "other.yaml"
    with other.open("w") as fh:
        yaml.dump(doc, fh)
    code, _, text = bench_cli(str(other), "-i", str(cluster.inventory_path), "--shots", "1")
    assert code == 1 and "recipe 'sim-tiny' serves" in text and "not 'other'" in text, text


def measured_against_ceiling(data: dict) -> float:
    """The rate bench holds against the ceiling (every row: of_ceiling x ceiling_tps), the same in each row."""
    rates = {round(h["of_ceiling"] * h["ceiling_tps"], 6) for h in data["ceiling"]["hypotheses"]}
    assert len(rates) == 1, data["ceiling"]["hypotheses"]
    return rates.pop()


def test_hypotheses_refute_the_widths_a_measured_rate_exceeds(served):
    """A bandwidth that puts the measured rate between the hypotheses' ceilings. The fake model is stored in
    BF16, so the ceilings are C (as stored, BF16), 2C (FP8) and 4C (4-bit); with C a third of the rate a
    first short run measured, the second run must refute as stored, BF16 and FP8 and leave 4-bit possible
    (a 33% margin either side), each verdict agreeing with its own row's ceiling and the measured median."""
    cluster, recipe = served
    args = (str(recipe), "-i", str(cluster.inventory_path), "--profile", "code", "--shots", "3",
            "--max-tokens", "120", "--json")
    code, first, text = bench_cli(*args)
    assert code == 0, text
    rate = measured_against_ceiling(first)
    bandwidth_gbs = (rate / 3) * FAKE_MODEL_BYTES_PER_TOKEN / 2 / 1e9  # 2 nodes: C = 2 x bw / bytes per token
    code, data, text = bench_cli(*args, "--bandwidth", f"{bandwidth_gbs:.12f}")
    assert code == 0, text
    measured = measured_against_ceiling(data)
    rows = {h["hypothesis"]: h for h in data["ceiling"]["hypotheses"]}
    assert rows["as stored (headers)"]["ceiling_tps"] == pytest.approx(rate / 3, rel=1e-6), (rows, rate)
    for row in rows.values():
        assert row["verdict"] == ("refuted" if measured > row["ceiling_tps"] else "possible"), (row, measured)
    assert {name: row["verdict"] for name, row in rows.items()} == {
        "as stored (headers)": "refuted", "weights read at 4-bit": "possible",
        "dequantized to FP8": "refuted", "dequantized to BF16": "refuted"}, (rows, rate, measured)
