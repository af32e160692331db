"""`bench RECIPE --replicates 4` on the simulated cluster (issue 38, acceptance 3): the stand-in's
first-run-fast fault makes the first sitting after a deploy decode twice as fast; the release is restarted
in place between replicates (same containers, a fresh engine process each time), and the capacity figure
leaves the first replicate out and says why. One `bench-replicates` audit line."""

from __future__ import annotations

import os
import statistics
import subprocess

import pytest
from bench_helpers import SPARK_DEPLOY, bench_cli
from ruamel.yaml import YAML
import cli_json

pytestmark = pytest.mark.integration

FACTOR = 2.0
FIRST_RUN = 1 + 3 + 1  # one replicate's fixed-length requests: the warm-up shot, 3 shots, the warm-TTFT probe


def containers(cluster, node: int) -> dict[str, str]:
    """ID -> StartedAt of the node's running spark-deploy containers."""
    ids = cluster.exec(node, ["docker", "ps", "-q", "--no-trunc", "--filter", "label=spark-deploy.managed=true"]).stdout
    out = {}
    for cid in ids.split():
        started = cluster.exec(node, ["docker", "inspect", "-f", "{{.State.StartedAt}}", cid]).stdout.strip()
        out[cid] = started
    return out


def audit(cluster) -> list[dict]:
    res = subprocess.run([str(SPARK_DEPLOY), "audit", "-i", str(cluster.inventory_path), "--json"],
                         capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    return cli_json.result(res.stdout)


@pytest.fixture(scope="module")
def served_fast_first(shared_pair, request, tmp_path_factory):
    """The shared pair serving the sim recipe with the first-run-fast fault (at 40 tok/s, so a shot is engine
    steps, not HTTP overhead): the first FIRST_RUN fixed-length requests of a deployment decode FACTOR x
    faster; the count survives a restart of the same containers, as a warm GPU would."""
    tmp_path = tmp_path_factory.mktemp("bench-replicates")
    with shared_pair.lend(request.module.__name__) as cluster:
        yaml = YAML()
        doc = yaml.load(cluster.recipe_path.read_text())
        doc["env"].update({"SIM_DECODE_TPS": "40", "SIM_FAULT_FIRST_RUN_FAST": str(FACTOR),
                           "SIM_FAULT_FIRST_RUN_REQUESTS": str(FIRST_RUN)})
        recipe = tmp_path / "recipe.yaml"
        with recipe.open("w") as fh:
            yaml.dump(doc, fh)
        up = subprocess.run([str(SPARK_DEPLOY), "up", str(recipe), "-i", str(cluster.inventory_path)],
                            capture_output=True, text=True, timeout=600)
        assert up.returncode == 0, up.stdout + up.stderr
        yield cluster, recipe


def test_replicates_leave_out_the_first_run_after_a_deploy(served_fast_first):
    cluster, recipe = served_fast_first
    before = {n: containers(cluster, n) for n in (1, 2)}
    lines_before = len(audit(cluster))
    code, data, text = bench_cli(str(recipe), "-i", str(cluster.inventory_path), "--replicates", "4",
                                 "--profile", "code", "--shots", "3", "--max-tokens", "80", "--json")
    assert code == 0, text
    assert data["release"] == 1 and [r["restarted"] for r in data["replicates"]] == [False, True, True, True]

    (row,) = data["capacity"]
    assert (row["profile"], row["concurrency"], row["replicates"]) == ("code", 1, [1, 2, 3, 4])
    first, *rest = row["medians"]
    assert first > 1.5 * max(rest), row  # the fault: the first sitting after the deploy ran ~2x
    assert [o["replicate"] for o in row["outliers"]] == [1], row
    why = row["outliers"][0]["why"]
    assert why.startswith(f"replicate 1 (first run after start): {first:.1f} vs {min(rest):.1f}-{max(rest):.1f}")
    assert why.endswith("not used for capacity")
    assert row["used"] == rest
    lo, hi = row["interval"]
    assert row["capacity"] == lo and lo < statistics.mean(rest) < hi and lo < first
    assert row["between_spread"] == pytest.approx((first - min(rest)) / statistics.mean(row["medians"]))
    assert len(row["within_spread"]) == 4

    # restarted in place: the same containers on both nodes, each started again (a fresh engine process)
    after = {n: containers(cluster, n) for n in (1, 2)}
    for n in (1, 2):
        assert set(after[n]) == set(before[n]) and len(after[n]) == 1, (before, after)
        assert all(after[n][cid] != before[n][cid] for cid in after[n]), (before, after)

    # one audit line for the whole run, the record a part of it
    new = audit(cluster)[lines_before:]
    assert [line["action"] for line in new] == ["bench-replicates"], new
    (line,) = new
    assert line["outcome"] == "ok" and line["release"] == 1
    assert "restarted 3 times" in line["detail"] and "replicate 1 (first run after start)" in line["detail"]
    assert [p["action"] for p in line.get("parts", [])] == ["bench-record"], line

    # recorded with the release and shown in history where bench figures show
    hist = subprocess.run([str(SPARK_DEPLOY), "history", "-i", str(cluster.inventory_path), "--json"],
                          capture_output=True, text=True, timeout=120)
    assert hist.returncode == 0, hist.stderr
    (rec,) = cli_json.result(hist.stdout)
    cap = rec["bench"]["replicates"]["profiles"]["code"]
    assert cap["capacity"] == pytest.approx(row["capacity"]) and cap["left_out"] == [why]
    table = subprocess.run([str(SPARK_DEPLOY), "history", "-i", str(cluster.inventory_path)],
                           capture_output=True, text=True, timeout=120, env={**os.environ, "COLUMNS": "400"})
    assert f"cap {row['capacity']:.1f} (3 of 4 runs)" in column(table.stdout, "bench tok/s"), table.stdout


def column(table: str, title: str) -> str:
    """One column of a rich table, its cells' wrapped lines joined (a cell wraps within its column)."""
    lines = table.splitlines()
    header = next(line for line in lines if title in line)
    at = [part.strip() for part in header.split("┃")].index(title)
    cells = [line.split("│")[at].strip() for line in lines if line.startswith("│")]
    return " ".join(" ".join(cells).split())


def test_replicates_need_a_recipe_and_two(served_fast_first):
    cluster, recipe = served_fast_first
    code, _, text = bench_cli(str(recipe), "-i", str(cluster.inventory_path), "--replicates", "1")
    assert code == 2 and "N >= 2" in text, text
    code, _, text = bench_cli("--url", "http://127.0.0.1:9", "--replicates", "3")
    assert code == 2 and "needs a RECIPE" in text, text
