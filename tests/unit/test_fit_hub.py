"""`fit --memory` against the Hub stand-in on 127.0.0.1 (real HTTP, the real huggingface_hub client): a model
whose headers say 83 GiB per rank is sized from header ranges alone, by model-fit's arithmetic, and the
stand-in's byte counts show that no weight file was downloaded."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

pytest.importorskip("huggingface_hub")

import cli_json  # noqa: E402
from orchestrator.cli.main import app  # noqa: E402
from orchestrator.sim import fake_big  # noqa: E402
from orchestrator.sim.hub import HubRepo, HubStandIn, SparseFile  # noqa: E402

RECIPE = Path(__file__).resolve().parents[2] / "orchestrator" / "sim" / "recipes" / "sim-tiny.yaml"
REPO = "sim/big-83"
GIB = 1 << 30
SPARK = "119.7GiB"
PREFETCH = 100_001  # huggingface_hub's first header read: bytes=0-100000


def recipe(tmp_path: Path, utilization: float, repo: str = REPO) -> Path:
    text = RECIPE.read_text().replace("repo: sim/tiny-moe", f"repo: {repo}")
    text = text.replace("gpu_memory_utilization: 0.7 ", f"gpu_memory_utilization: {utilization} ")
    path = tmp_path / f"big-{utilization}.yaml"
    path.write_text(text)
    return path


def run(hub: HubStandIn, *args: str, token: str = "") -> tuple[int, str]:
    env = {"HF_ENDPOINT": hub.endpoint("127.0.0.1"), "HF_TOKEN": token, "HF_HUB_DISABLE_TELEMETRY": "1"}
    result = CliRunner().invoke(app, ["fit", *args], env=env)
    return result.exit_code, result.stdout + (result.stderr if result.stderr_bytes is not None else "")


def expected_weights_per_rank(tp: int = 2) -> int:
    """Independently of model_fit: 1-D tensors whole on every rank, matrices split over tp, all BF16."""
    whole = split = 0
    for shard in fake_big.tensors(83):
        for _, shape in shard:
            n = 2
            for d in shape:
                n *= d
            if len(shape) == 1:
                whole += n
            else:
                split += n
    return whole + -(-split // tp)


def header_reads_only(hub: HubStandIn, repo: HubRepo) -> None:
    """Every safetensors body sent was a closed range inside huggingface_hub's header read; only the small
    files came whole."""
    shards = [s for s in hub.served if s.name.endswith(".safetensors")]
    assert len(shards) == fake_big.SHARDS and all(s.ranged and s.stop <= PREFETCH for s in shards), shards
    assert hub.downloaded == len(repo.files["config.json"])
    weights = sum(f.size for f in repo.files.values() if isinstance(f, SparseFile))
    assert weights > 160 * GIB and hub.weight_bytes <= fake_big.SHARDS * PREFETCH


def test_83_gib_per_rank_fits_at_0_8_from_header_ranges_only(tmp_path):
    repo = fake_big.repo(REPO, 83)
    with HubStandIn([repo], host="127.0.0.1") as hub:
        code, said = run(hub, str(recipe(tmp_path, 0.8)), "--memory", SPARK, "--json")
    assert code == 0, said
    got = cli_json.result(said)
    assert got["ok"] and got["revision"] == repo.commit and got["memory_from"] == f"--memory {SPARK} on each of 2 node(s)"
    assert sorted(got["nodes"]) == ["node-1", "node-2"]
    node = got["nodes"]["node-1"]
    assert node["weights_per_rank"] == expected_weights_per_rank() and round(node["weights_per_rank"] / GIB) == 83
    assert node["mem_total"] == int(119.7 * GIB) and node["budget"] == int(0.8 * node["mem_total"])
    assert node["kv_bytes_per_token"] == 64 * 2 * (8 // 2) * 128 * 1  # layers x K,V x KV heads/rank x head_dim x fp8
    page = node["kv_bytes_per_token"] * 256  # the recipe's block-size
    assert node["tokens"] == node["kv_memory"] // page * 256 > 4096
    assert node["concurrency"] == round(node["tokens"] / 4096, 2)
    assert node["state"] == "fits" and got["fixes"] == []
    header_reads_only(hub, repo)


def test_at_0_7_the_weights_do_not_fit_and_it_exits_1_naming_the_figures(tmp_path):
    repo = fake_big.repo(REPO, 83)
    with HubStandIn([repo], host="127.0.0.1") as hub:
        code, said = run(hub, str(recipe(tmp_path, 0.7)), "--memory", SPARK)
        jcode, jsaid = run(hub, str(recipe(tmp_path, 0.7)), "--memory", SPARK, "--json")
    assert code == 1, said
    flat = " ".join(said.split())
    assert "does not fit: node-1: weights 83.0 GiB/rank" in flat and "0.7 x MemTotal 119.7 GiB = 83.8 GiB" in flat, flat
    assert "raise vllm.tensor_parallel_size (now 2)" in flat
    got = cli_json.result(jsaid)
    assert jcode == 1 and got["ok"] is False
    assert {n["state"] for n in got["nodes"].values()} == {"weights-do-not-fit"}
    assert got["nodes"]["node-1"]["kv_memory"] < 0 and got["nodes"]["node-1"]["tokens"] == 0


def test_a_layout_model_fit_does_not_know_is_cannot_judge_with_the_reason(tmp_path):
    repo = fake_big.repo("sim/big-v4", 40)
    config = {**fake_big.config(), "model_type": "deepseek_v4"}
    repo.files["config.json"] = json.dumps(config).encode()
    with HubStandIn([repo], host="127.0.0.1") as hub:
        code, said = run(hub, str(recipe(tmp_path, 0.8, "sim/big-v4")), "--memory", SPARK, "--json")
    assert code == 0, said
    node = cli_json.result(said)["nodes"]["node-2"]
    assert node["state"] == "kv-not-judged" and node["kv_bytes_per_token"] is None and node["tokens"] is None
    assert "model_type deepseek_v4" in node["kv_unknown"] and node["kv_memory"] > 0


def test_a_gated_repo_is_named_and_the_token_never_printed(tmp_path):
    repo = fake_big.repo(REPO, 83)
    repo.token = "hf_the_right_one"
    with HubStandIn([repo], host="127.0.0.1") as hub:
        code, said = run(hub, str(recipe(tmp_path, 0.8)), "--memory", SPARK, token="hf_secret_wrong_token")
        ok, _ = run(hub, str(recipe(tmp_path, 0.8)), "--memory", SPARK, token="hf_the_right_one")
    assert code == 1 and "sim/big-83 is gated" in " ".join(said.split()), said
    assert "hf_secret_wrong_token" not in said
    assert ok == 0


@pytest.mark.parametrize("args, words", [
    (["--memory", "lots"], "--memory 'lots': write a size such as 128GB"),
    (["--nodes", "2"], "--nodes is for --memory"),
    (["--memory", "128GB", "-i", "x.yaml"], "--memory replaces the inventory"),
])
def test_bad_input_exits_2_saying_what_to_write(tmp_path, args, words):
    with HubStandIn([], host="127.0.0.1") as hub:
        code, said = run(hub, str(recipe(tmp_path, 0.8)), *args)
    assert code == 2 and words in " ".join(said.split()), said
