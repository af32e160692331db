"""Issue 38, acceptance 1: `up RECIPE --gate --profile code,zh` on the simulated cluster.

A is a plain (no speculation) release of the sim recipe; a candidate whose stand-in decodes zh 20% slower
(SIM_PROFILE_SLOW=zh=0.8, a recipe env change: a plan of its own) is rejected (exit 1) naming zh, and A's plan
serves again; a candidate that differs by an env var the stand-in ignores is kept. Both verdicts, with A's and
B's medians, B/A and its interval, are read back from B's release record through `history --json`, and the
run leaves exactly one `up-gate` audit line.
"""

from __future__ import annotations


import pytest
from bench_helpers import audit_lines, cli, history, serving
from ruamel.yaml import YAML
import cli_json

pytestmark = [pytest.mark.integration,
              pytest.mark.timing]  # B/A is a ratio of wall-clock rates: run alone (scripts/test)

SHOTS = ("--profile", "code,zh", "--shots", "3", "--max-tokens", "150")  # 3 shots x 2 blocks: a 95% CI per side


def _recipe(src, dest, env: dict[str, str]):
    """The sim recipe without speculation (plain decoding spreads ~1%), at 300 tok/s, plus `env`."""
    yaml = YAML()
    doc = yaml.load(src.read_text())
    doc["vllm"]["speculative_config"] = None
    doc["env"]["SIM_DECODE_TPS"] = "300"
    doc["env"].update(env)
    with dest.open("w") as fh:
        yaml.dump(doc, fh)
    return dest


@pytest.fixture(scope="module")
def plain(shared_pair, request, tmp_path_factory):
    tmp = tmp_path_factory.mktemp("gate")
    with shared_pair.lend(request.module.__name__) as cluster:
        a = _recipe(cluster.recipe_path, tmp / "a.yaml", {})
        up = cli("up", str(a), "-i", str(cluster.inventory_path))
        assert up.returncode == 0, up.stdout + up.stderr
        yield cluster, tmp


def test_candidate_slower_on_zh_is_rejected_and_a_serves_again(plain):
    cluster, tmp = plain
    before = serving(history(cluster))
    audits = len(audit_lines(cluster, "up-gate", tail=200))
    slow = _recipe(cluster.recipe_path, tmp / "slow-zh.yaml", {"SIM_PROFILE_SLOW": "zh=0.8"})
    res = cli("up", str(slow), "--gate", *SHOTS, "-i", str(cluster.inventory_path), "--json")
    assert res.returncode == 1, res.stdout + res.stderr
    data = cli_json.result(res.stdout)
    assert data["verdict"] == "rejected" and data["against"] == before["id"], data
    assert [b["label"] for b in data["compare"]["blocks"]] == list("ABAB")
    zh, code = data["profiles"]["zh"], data["profiles"]["code"]
    assert zh["verdict"] == "below" and code["verdict"] == "within", data["profiles"]
    assert zh["ratio"] == pytest.approx(0.8, abs=0.05)  # the stand-in's truth: zh at 0.8x, code untouched
    assert zh["interval_kind"] == "95% CI" and zh["interval"][0] <= zh["ratio"] <= zh["interval"][1] < zh["bound"]
    assert code["ratio"] == pytest.approx(1.0, abs=0.05)
    assert "zh B/A" in res.stderr and f"{zh['ratio']:.3f}" in res.stderr and f"{zh['bound']:.3f}" in res.stderr

    records = history(cluster)
    now = serving(records)  # A's plan serves again: a rollback to A's release
    assert now["plan_hash"] == before["plan_hash"] and now["rollback_of"] == before["id"], now
    b = records[data["release"]]
    assert b["plan_hash"] != before["plan_hash"] and not b["serving"]
    assert b["gate"]["verdict"] == "rejected" and "zh" in b["gate"]["reason"]
    assert b["gate"]["profiles"]["zh"]["ratio"] == zh["ratio"] and b["gate"]["profiles"]["zh"]["interval"]
    assert b["gate"]["profiles"]["zh"]["a"] > b["gate"]["profiles"]["zh"]["b"]
    (line,) = audit_lines(cluster, "up-gate", tail=200)[audits:]  # one audit line for the whole gate, the blocks as its parts
    assert line["outcome"] == "failed" and line["release"] == data["release"], line


def test_harmless_candidate_is_kept_with_its_ratios(plain):
    cluster, tmp = plain
    before = serving(history(cluster))
    harmless = _recipe(cluster.recipe_path, tmp / "harmless.yaml", {"SIM_IGNORED_BY_STANDIN": "1"})
    res = cli("up", str(harmless), "--gate", *SHOTS, "-i", str(cluster.inventory_path), "--json")
    assert res.returncode == 0, res.stdout + res.stderr
    data = cli_json.result(res.stdout)
    assert data["verdict"] == "kept" and data["against"] == before["id"], data
    for profile in ("code", "zh"):
        p = data["profiles"][profile]
        assert p["verdict"] == "within" and p["ratio"] == pytest.approx(1.0, abs=0.05), p
    records = history(cluster)
    now = serving(records)  # B serves: its release, started again by its last block
    b = records[data["release"]]
    assert now["plan_hash"] == b["plan_hash"] != before["plan_hash"], (now, b)
    assert b["gate"]["verdict"] == "kept" and set(b["gate"]["profiles"]) == {"code", "zh"}
    assert now["gate"]["verdict"] == "kept"


def test_nothing_serving_is_bad_input(plain):
    cluster, tmp = plain
    down = cli("down", "-i", str(cluster.inventory_path), "--yes", timeout=300)
    assert down.returncode == 0, down.stdout + down.stderr
    candidate = _recipe(cluster.recipe_path, tmp / "candidate.yaml", {"SIM_IGNORED_BY_STANDIN": "2"})
    res = cli("up", str(candidate), "--gate", "-i", str(cluster.inventory_path))
    assert res.returncode == 2, res.stdout + res.stderr
    assert "nothing to gate against; run `up` without --gate" in res.stderr
