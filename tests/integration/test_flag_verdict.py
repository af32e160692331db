"""Issue 36: one verdict on a `vllm.extra` flag. `up` refuses a mistyped or unknown flag as `validate` and
`render` do — exit 2, the same file:line message, from the same table — before it contacts a node, so
nothing on any node changes (no container, no image, no release record, no audit line, no lock)."""

from __future__ import annotations

import json

import pytest
from deploy_helpers import node_docker, recipe_variant, spark_deploy

from ruamel.yaml import YAML

import cli_json
from orchestrator.sim.state import NODE_STATE_DIR

pytestmark = pytest.mark.integration


def node_state(cluster) -> dict[str, tuple[str, str, str]]:
    """Per node, what `up` could change: every container with its state and start time, the images, and
    the spark-deploy state dir's files (releases, audit, lock) with their hashes."""
    found = {}
    for info in cluster.nodes():
        ids = node_docker(cluster, info.index, "ps", "-aq", "--no-trunc", check=True).stdout.split()
        containers = node_docker(cluster, info.index, "inspect", "--format", "{{.Id}} {{.State.Status}} "
                                 "{{.State.StartedAt}}", *ids, check=True).stdout if ids else ""
        images = node_docker(cluster, info.index, "images", "-q", "--no-trunc", check=True).stdout
        files = cluster.exec(info.index, ["sh", "-c", f"find {NODE_STATE_DIR} -type f -exec sha256sum {{}} + "
                                          "2>/dev/null | sort"]).stdout
        found[info.name] = (containers, images, files)
    return found


def engine_events(cluster, since: str) -> dict[str, str]:
    """Everything each node's Docker engine did since `since` (a node clock reading)."""
    until = cluster.exec(1, ["date", "+%s.%N"]).stdout.strip()
    return {info.name: node_docker(cluster, info.index, "events", "--since", since, "--until", until,
                                   check=True).stdout for info in cluster.nodes()}


@pytest.mark.parametrize("flag, says", [
    ("max-num-seq", "fix: did you mean --max-num-seqs?"),
    ("frobnicate-widgets", "`spark-deploy pin RECIPE`"),
])
def test_up_refuses_a_flag_as_validate_and_render_do_before_any_node_changes(clean, tmp_path, flag, says):
    cluster = clean
    recipe = recipe_variant(cluster, tmp_path / "r.yaml", extra={flag: 12})
    line = next(i for i, text in enumerate(recipe.read_text().splitlines(), 1) if text.strip() == f"{flag}: 12")
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}  # no image parser cached: the shipped table
    before, since = node_state(cluster), cluster.exec(1, ["date", "+%s.%N"]).stdout.strip()

    answers = {command: spark_deploy(command, recipe, "-i", cluster.inventory_path, env=cache)
               for command in ("validate", "render", "up")}

    for command, result in answers.items():
        assert result.returncode == 2, f"{command}: exit {result.returncode}\n{result.stdout}\n{result.stderr}"
    errors = {command: [x for x in r.stderr.splitlines() if x.startswith("error: ")] for command, r in answers.items()}
    assert errors["validate"] == errors["render"] == errors["up"], errors
    assert len(errors["up"]) == 1 and errors["up"][0].startswith(f"error: {recipe}:{line}: vllm.extra.{flag}: ")
    assert "vLLM 0.33.0's option table shipped with spark-deploy" in errors["up"][0] and says in errors["up"][0]
    assert node_state(cluster) == before, "up changed a node"
    assert engine_events(cluster, since) == {info.name: "" for info in cluster.nodes()}


def test_pin_caches_the_images_own_parser_and_validate_then_judges_by_it(clean, tmp_path):
    """`pin` runs the pinned image's `vllm serve --help=all` on the node (the stand-in's parser) and caches
    it by image ID under the user's cache dir; `validate` then names that table instead of the shipped one."""
    cluster = clean
    recipe = recipe_variant(cluster, tmp_path / "r.yaml")
    image = YAML(typ="safe").load(recipe.read_text())["image"]["id"]
    cache = {"XDG_CACHE_HOME": str(tmp_path / "cache")}
    cached = tmp_path / "cache" / "spark-deploy" / "vllm-help" / (image.replace(":", "-") + ".json")
    before = spark_deploy("validate", recipe, "-i", cluster.inventory_path, "--json", env=cache)
    assert before.returncode == 0, before.stderr
    assert cli_json.result(before.stdout)["flag_table"].startswith("vLLM 0.33.0's option table shipped with spark-deploy")

    pinned = spark_deploy("pin", recipe, "-i", cluster.inventory_path, "--json", env=cache)

    assert pinned.returncode == 0, f"{pinned.stdout}\n{pinned.stderr}"
    said = cli_json.result(pinned.stdout)
    assert said["image_id"] == image and said["parser"] == {"state": "read and cached", "detail": str(cached)}
    data = json.loads(cached.read_text())
    assert data["image"] == image and data["via"] == "--help=all"
    assert "--max-num-seqs" in data["options"] and "fp8_ds_mla" in data["listed"]["--kv-cache-dtype"]
    after = spark_deploy("validate", recipe, "-i", cluster.inventory_path, "--json", env=cache)
    assert cli_json.result(after.stdout)["flag_table"] == f"the image {image[:19]}'s own parser (cached in {cached})"
    again = spark_deploy("pin", recipe, "-i", cluster.inventory_path, "--json", env=cache)
    assert cli_json.result(again.stdout)["parser"]["state"] == "already cached"
