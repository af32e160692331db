"""Acceptance 5 of issue 12: `bench --compare A.yaml B.yaml --blocks ABAB` on the simulated cluster deploys
A, B, A, B as releases, reports B/A and the drift between blocks, and leaves the release that served
before serving again."""

from __future__ import annotations

import subprocess

import pytest
from bench_helpers import SPARK_DEPLOY, bench_cli, head_truth
from ruamel.yaml import YAML
import cli_json

pytestmark = [pytest.mark.integration,
              pytest.mark.timing]  # drift between blocks is a wall-clock rate: run alone (scripts/test)


def _variant(src, dest, name: str, spec: bool):
    yaml = YAML()
    doc = yaml.load(src.read_text())
    doc["name"] = name
    doc["env"]["SIM_ACCEPT"] = "code=3.0:0.6:0.03"
    if not spec:
        doc["vllm"]["speculative_config"] = None
    with dest.open("w") as fh:
        yaml.dump(doc, fh)
    return dest


def test_compare_abab_reports_ratio_and_drift_and_restores(served, tmp_path):
    cluster, recipe = served
    a = _variant(recipe, tmp_path / "base.yaml", "base", spec=False)
    b = _variant(recipe, tmp_path / "spec.yaml", "spec", spec=True)
    code, data, text = bench_cli("--compare", str(a), str(b), "--blocks", "ABAB", "-i", str(cluster.inventory_path),
                                 "--profile", "code", "--shots", "3", "--warmup", "1", "--max-tokens", "150",
                                 "--json", timeout=900)
    assert code == 0, text
    assert [blk["label"] for blk in data["blocks"]] == list("ABAB")
    releases = [blk["release"] for blk in data["blocks"]]
    assert releases == sorted(releases) and len(set(releases)) == 4 and releases[0] > 1  # four new releases
    (row,) = data["ratios"]
    assert len(row["a_blocks"]) == 2 and len(row["b_blocks"]) == 2
    assert row["a_drift"] is not None and row["a_drift"] < 0.05  # plain decoding barely drifts
    assert data["before"] == 1 and "release 1 serves again" in data["restored"]
    hist = subprocess.run([str(SPARK_DEPLOY), "history", "-i", str(cluster.inventory_path), "--json"],
                          capture_output=True, text=True, timeout=120)
    records = {r["id"]: r for r in cli_json.result(hist.stdout)}
    for blk in data["blocks"]:  # each block's figures are recorded with its release
        rec = records[blk["release"]]["bench"]
        assert rec["headline"]["code"]["decode_tps"] == pytest.approx(blk["groups"][0]["decode_tps"]["median"])
    serving = [r for r in cli_json.result(hist.stdout) if r["serving"]]
    assert len(serving) == 1 and serving[0]["recipe"] == "sim-tiny" and serving[0]["rollback_of"] == 1, serving

    # the truth as B's head prints it (`SIM truth:`: the plain rate, the draft budget and cost, the acceptance),
    # read from B deployed once more (alone): B/A = (1 + E[accepted]) / (1 + draft_cost x k) at the rate it runs
    from orchestrator.sim.standin.speed import expected

    down = subprocess.run([str(SPARK_DEPLOY), "down", "-i", str(cluster.inventory_path)],
                          capture_output=True, text=True, timeout=300)  # B cannot share A's port
    assert down.returncode == 0, down.stdout + down.stderr
    again = subprocess.run([str(SPARK_DEPLOY), "up", str(b), "-i", str(cluster.inventory_path)],
                           capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stdout + again.stderr
    truth = head_truth(cluster, "spec")
    assert truth.spec_k == 5 and truth.accept["code"][0] == 3.0, truth
    want = expected(truth, "code").decode_tps / truth.decode_tps
    assert row["ratio"] == pytest.approx(want, rel=0.05), (row, want)
