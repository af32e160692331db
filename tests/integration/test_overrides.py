"""`up --set KEY=VALUE` on the simulated cluster: the override serves, the release records the effective
recipe, and `history --recipe N` gives it back so that it deploys the same plan. Real sshd, dockerd and
stand-in; the real CLI in subprocesses."""

from __future__ import annotations


import pytest

from deploy_helpers import forget_releases, spark_deploy
import cli_json

pytestmark = pytest.mark.integration


def _plan_hash(recipe, inventory, *extra) -> str:
    result = spark_deploy("render", str(recipe), "-i", str(inventory), *extra, "--json")
    assert result.returncode == 0, result.stderr + result.stdout
    hashes = {rank["plan_hash"] for rank in cli_json.result(result.stdout)}
    assert len(hashes) == 1
    return hashes.pop()


# The model's config says 4096 positions: vLLM (and the stand-in) refuse more unless this env var allows it.
SETS = ("--set", "vllm.max_model_len=8192", "--set", 'env.VLLM_ALLOW_LONG_MAX_MODEL_LEN="1"')


def test_up_with_set_serves_and_history_recipe_deploys_the_same_plan(clean, tmp_path):
    cluster = clean
    forget_releases(cluster)
    recipe, inventory = cluster.recipe_path, cluster.inventory_path
    comments = [line for line in recipe.read_text().splitlines() if line.lstrip().startswith("#")]
    assert comments, "the sim recipe is expected to carry comments"

    served = spark_deploy("up", str(recipe), "-i", str(inventory), *SETS, timeout=600)
    assert served.returncode == 0, served.stderr + served.stdout
    assert "serving" in served.stdout

    history = spark_deploy("history", "-i", str(inventory), "--json")
    assert history.returncode == 0, history.stderr
    release = cli_json.result(history.stdout)[0]
    assert release["serving"] is True
    n = release["id"]
    # the file alone renders another plan: the override is what the release runs
    assert _plan_hash(recipe, inventory) != release["plan_hash"]
    assert _plan_hash(recipe, inventory, *SETS) == release["plan_hash"]

    written = tmp_path / f"release-{n}.yaml"
    got = spark_deploy("history", "-i", str(inventory), "--recipe", str(n), "-o", str(written))
    assert got.returncode == 0, got.stderr + got.stdout
    text = written.read_text()
    assert "max_model_len: 8192" in text and 'VLLM_ALLOW_LONG_MAX_MODEL_LEN: "1"' in text
    assert all(line in text for line in comments)  # the file's comments came along with the release
    printed = spark_deploy("history", "-i", str(inventory), "--recipe", str(n))
    assert printed.returncode == 0 and printed.stdout == text, printed.stderr

    assert _plan_hash(written, inventory) == release["plan_hash"]
    again = spark_deploy("up", str(written), "-i", str(inventory), timeout=600)
    assert again.returncode == 0, again.stderr + again.stdout
    assert "already serving" in again.stdout and release["plan_hash"] in again.stdout

    missing = spark_deploy("history", "-i", str(inventory), "--recipe", str(n + 5))
    assert missing.returncode == 2 and f"--recipe {n + 5}: no such release" in missing.stderr, missing.stderr
