"""Issue 38, acceptance 2: `spark-deploy tune` over num_speculative_tokens {2,4,6,8} on the simulated cluster.

The stand-in is seeded with per-profile acceptance curves (SIM_ACCEPT_CURVE) and a step cost growing with
the budget (SIM_DRAFT_COST), so code's best budget is 6 and chat's (the stand-in's prose profile) is 2 —
read from the stand-in's truth formula (speed.expected), never written here. The table must name those
per profile (or say the best is within the spread of the next), the no-speculation baseline must be
measured in the same run, the winner must serve and be written as a recipe; an illegal value (not dividing
the model's n_predict, written into both nodes' config.json) is refused before anything loads.
"""

from __future__ import annotations

import json
import math
import shlex
import statistics
from pathlib import Path

import pytest
from bench_helpers import audit_lines, cli, history, serving
from ruamel.yaml import YAML

from orchestrator.config.load import load_inventory
from orchestrator.sim import fake_model
from orchestrator.sim.standin.speed import Truth, expected
import cli_json

pytestmark = [pytest.mark.integration,
              pytest.mark.timing]  # ratios of wall-clock rates: run alone (scripts/test)

REWRITE_CONFIG = 'd="$1/hub/$2"; f="$d/snapshots/$(cat "$d/refs/main")/config.json"; rm -f "$f" && printf "%s\\n" "$3" > "$f"'
N_PREDICT = 2
ENV = {"SIM_DECODE_TPS": "150", "SIM_DRAFT_COST": "0.2",
       "SIM_ACCEPT_CURVE": "code=0.98:0.96:0.94:0.92:0.9:0.88:0.3:0.2,prose=0.8:0.5:0.2:0.1:0.05:0.02"}
STANDIN_PROFILE = {"code": "code", "chat": "prose"}  # the stand-in reads a chat prompt as prose
KEY = "vllm.speculative_config.num_speculative_tokens"
BUDGETS = (2, 4, 6, 8)


DOC = Path(__file__).resolve().parents[2] / "docs" / "tune.md"


def _doc_command(needle: str, recipe: Path, out: Path) -> list[str]:
    """The `$ spark-deploy tune ...` line of docs/tune.md containing `needle`, its files made this test's."""
    (line,) = [ln for ln in DOC.read_text().splitlines() if ln.startswith("$ spark-deploy tune ") and needle in ln]
    args = shlex.split(line)[2:]
    return [str(recipe) if a == "spec.yaml" else str(out) if a == "spec-tuned.yaml" else a for a in args]


def _truth_rates() -> dict[str, dict[int, float]]:
    """Expected decode tok/s per profile and budget (0 = no speculation), from the stand-in's formula."""
    truth = Truth.from_env(ENV)
    return {p: {k: expected(truth, sp, k).decode_tps for k in (0, *BUDGETS)} for p, sp in STANDIN_PROFILE.items()}


@pytest.fixture(scope="module")
def tuned_cluster(shared_pair, request, tmp_path_factory):
    """An MTP recipe at num_speculative_tokens 8 serving, the model's n_predict set to 2 on both nodes."""
    tmp = tmp_path_factory.mktemp("tune")
    with shared_pair.lend(request.module.__name__) as cluster:
        config = json.dumps({**fake_model.model_config(), "n_predict": N_PREDICT})
        inventory, _ = load_inventory(cluster.inventory_path)
        try:
            for info in cluster.nodes():
                cluster.exec(info.index, ["sh", "-c", REWRITE_CONFIG, "sh", inventory.node(info.name).hf_cache,
                                          fake_model.CACHE_DIR_NAME, config])
            yaml = YAML()
            doc = yaml.load(cluster.recipe_path.read_text())
            doc["vllm"]["speculative_config"] = {"method": "mtp", "num_speculative_tokens": 8}
            doc["env"].update(ENV)
            recipe = tmp / "spec.yaml"
            with recipe.open("w") as fh:
                yaml.dump(doc, fh)
            up = cli("up", str(recipe), "-i", str(cluster.inventory_path), timeout=600)
            assert up.returncode == 0, up.stdout + up.stderr
            yield cluster, recipe
        finally:
            cluster.fault("all", "model-reset")


def test_an_illegal_value_is_refused_before_any_load(tuned_cluster):
    cluster, recipe = tuned_cluster
    before = history(cluster)
    audits = len(audit_lines(cluster, "tune"))
    args = _doc_command("=2,3", recipe, recipe.with_name("spec-tuned.yaml"))  # the doc's refused example
    assert args[:3] == ["tune", str(recipe), "--set"] and args[3] == f"{KEY}=2,3", args
    res = cli(*args, "-i", str(cluster.inventory_path), timeout=300)
    assert res.returncode == 2, res.stdout + res.stderr
    assert "num_speculative_tokens=3 is not divisible by n_predict=2" in res.stderr, res.stderr
    assert "refused before any load" in res.stderr
    after = history(cluster)
    assert after.keys() == before.keys() and serving(after)["id"] == serving(before)["id"]  # nothing deployed
    (line,) = audit_lines(cluster, "tune")[audits:]
    assert line["outcome"] == "refused", line
    assert not recipe.with_name("spec-tuned.yaml").exists()


def test_a_bad_set_is_bad_input(tuned_cluster):
    cluster, recipe = tuned_cluster
    res = cli("tune", str(recipe), "--set", "vllm.speculative_config.num_speculative_tokens", "-i",
              str(cluster.inventory_path), timeout=120)
    assert res.returncode == 2 and "want KEY=V1,V2" in res.stderr, res.stdout + res.stderr


def test_tune_names_each_profiles_best_and_the_winner_serves(tuned_cluster):
    cluster, recipe = tuned_cluster
    out = recipe.with_name("winner.yaml")
    audits = len(audit_lines(cluster, "tune"))
    args = _doc_command("=2,4,6,8", recipe, out)  # docs/tune.md's worked example, run here
    assert args[:4] == ["tune", str(recipe), "--set", f"{KEY}={','.join(map(str, BUDGETS))}"], args
    assert "--profile" in args and args[args.index("--profile") + 1] == "code,chat" and str(out) in args
    res = cli(*args, "-i", str(cluster.inventory_path), "--json", timeout=1500)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    data = cli_json.result(res.stdout)
    labels = [v["label"] for v in data["variants"]]
    value = {i: v["changes"].get(KEY) for i, v in enumerate(data["variants"])}  # None: the baseline
    assert labels[data["original"]] == "num_speculative_tokens=8 (original)"
    base = data["baseline"]
    assert labels[base] == "no speculation" and data["variants"][base]["release"] is not None
    first = [labels[data["original"]]] + [x for i, x in enumerate(labels) if i != data["original"]]
    assert len(data["order"]) == 2 * len(labels) and data["order"][:len(labels)] == first  # balanced, the
    assert data["order"][len(labels):] == first[::-1]  # original first and last: the run ends on it

    truth = _truth_rates()
    for profile, rates in truth.items():
        table = data["profiles"][profile]
        rows = {r["variant"]: r for r in table["rows"]}
        assert rows[base]["ratio"] == pytest.approx(1.0) and rows[base]["per_position"] is None
        want = max(BUDGETS, key=lambda k: rates[k])
        best = value[table["best"]]
        if table["decided"]:
            assert best == want, (profile, table["verdict"], want)
        else:  # within the spread: the truth's best is the best or the runner-up
            assert want in (best, value[table["runner_up"]]), (profile, table["verdict"], want)
        assert "best: num_speculative_tokens=" in table["verdict"]
        for i, row in rows.items():  # each variant's ratio to the baseline near the truth's
            if i != base:
                assert row["ratio"] == pytest.approx(rates[value[i]] / rates[0], rel=0.15), (profile, labels[i], row)
                assert len(row["per_position"]) == value[i]
                assert row["per_position"] == sorted(row["per_position"], reverse=True)

    # the winner: the best geometric mean over the profiles, when beyond the spread; here k=8 is far behind
    score = {k: math.exp(statistics.mean(math.log(truth[p][k] / truth[p][8]) for p in truth)) for k in BUDGETS}
    top = max(score.values())
    won = data["winner"]
    assert won != data["original"] and score[value[won]] >= top * 0.95, (labels[won], score)
    records = history(cluster)
    now = serving(records)
    first = records[data["variants"][won]["release"]]
    assert now["plan_hash"] == first["plan_hash"], (now, first)
    assert now["tune"]["winner"] == won and set(now["tune"]["profiles"]) == {"code", "chat"}
    assert first["tune"]["profiles"]["code"]["rows"] == data["profiles"]["code"]["rows"]
    text = out.read_text()
    assert text.startswith("# spark-deploy tune: ") and "# code (decode tok/s" in text and "# winner: " in text
    doc = YAML(typ="safe").load(text)
    assert doc["vllm"]["speculative_config"]["num_speculative_tokens"] == value[won]
    check = cli("validate", str(out), "-i", str(cluster.inventory_path), timeout=120)
    assert check.returncode == 0, check.stdout + check.stderr
    (line,) = audit_lines(cluster, "tune")[audits:]  # one audit line, every up and rollback its parts
    assert line["outcome"] == "ok" and line["release"] == data["variants"][won]["release"], line
