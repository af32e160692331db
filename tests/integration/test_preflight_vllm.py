"""The vLLM preflight checks on a real simulated cluster: the stand-in image's own parser (run once on the
head, offline, then cached by image ID), the model's n_predict from each node's HF cache, overlay targets
in the image and sources on the nodes. Failures exit 1 before any container of ours exists."""

from __future__ import annotations

import json

import pytest
from deploy_helpers import assert_up_refuses, node_docker, our_containers, recipe_variant, spark_deploy
from image_variants import derive_without_choice
from ruamel.yaml import YAML

from orchestrator.config.load import load_deployment
from orchestrator.sim import fake_model
import cli_json

pytestmark = pytest.mark.integration

REWRITE_CONFIG = 'd="$1/hub/$2"; f="$d/snapshots/$(cat "$d/refs/main")/config.json"; rm -f "$f" && printf "%s\\n" "$3" > "$f"'
CHECKS = ("--only", "vllm-flags", "--only", "speculative-tokens", "--only", "overlay-targets")


def preflight(cluster, recipe, cache) -> tuple[int, dict, str]:
    r = spark_deploy("preflight", recipe, "-i", cluster.inventory_path, *CHECKS, "--json",
                     env={"XDG_CACHE_HOME": str(cache)})
    try:
        doc = cli_json.result(r.stdout)
    except ValueError:
        raise AssertionError(f"no JSON (exit {r.returncode}): {r.stdout}\n{r.stderr}") from None
    return r.returncode, {c["name"]: c for c in doc["checks"]}, r.stdout + r.stderr


def node_now(cluster) -> str:
    return cluster.exec(1, ["date", "+%s.%N"]).stdout.strip()


def created(cluster, since: str, until: str) -> list[str]:
    """Containers the head's engine created in that window (its event log: --rm leaves no other trace)."""
    r = node_docker(cluster, 1, "events", "--since", since, "--until", until, "--filter", "type=container",
                    "--filter", "event=create", "--format", "{{.Actor.Attributes.image}}", check=True)
    return [line for line in r.stdout.splitlines() if line]


def all_containers(cluster) -> dict[str, list[str]]:
    return {i.name: node_docker(cluster, i.index, "ps", "-a", "--format", "{{.Names}}", check=True).stdout.split()
            for i in cluster.nodes()}


@pytest.fixture
def rewrites_model(pair):
    """The test rewrites config.json in both nodes' snapshot and adds an overlay source: put back after."""
    yield pair
    pair.fault("all", "model-reset")
    pair.exec(1, ["rm", "-f", "/opt/overlay-only-here.py"])


def test_vllm_checks_healthy_cached_and_failing(pair, rewrites_model, tmp_path):
    cluster = pair
    cache = tmp_path / "xdg"
    dep = load_deployment(cluster.recipe_path, cluster.inventory_path)
    image = dep.recipe.image.id
    head = dep.inventory.head
    before = all_containers(cluster)

    # healthy, first run: the image is asked once, on the head, and the answer is cached by its ID
    t0 = node_now(cluster)
    code, checks, text = preflight(cluster, cluster.recipe_path, cache)
    t1 = node_now(cluster)
    assert code == 0, text
    flags = checks["vllm-flags"]
    assert flags["status"] == "ok" and list(flags["per_node"]) == [head], flags
    assert "cached" not in flags["per_node"][head]["value"]
    assert checks["speculative-tokens"]["status"] == "ok"
    assert checks["overlay-targets"]["status"] == "skip"  # the sim recipe has no overlays
    assert created(cluster, t0, t1) == [image]
    assert (cache / "spark-deploy" / "vllm-help" / (image.replace(":", "-") + ".json")).is_file()

    # second run: from the cache, no container created
    t2 = node_now(cluster)
    code, checks, text = preflight(cluster, cluster.recipe_path, cache)
    t3 = node_now(cluster)
    assert code == 0, text
    assert "cached" in checks["vllm-flags"]["per_node"][head]["value"]
    assert created(cluster, t2, t3) == []

    # an unknown flag in vllm.extra
    bad = recipe_variant(cluster, tmp_path / "unknown.yaml", extra={"max-num-seqz": 8})
    code, checks, text = preflight(cluster, bad, cache)
    assert code == 1
    value = checks["vllm-flags"]["per_node"][head]["value"]
    assert checks["vllm-flags"]["status"] == "fail" and "unknown flag --max-num-seqz" in value
    assert "--max-num-seqs" in value  # the closest real one

    # a bad choice (--moe-backend cannot be given wrong: the recipe checks vllm.moe_backend against vLLM's
    # table and vllm.extra refuses the owned flag; --linear-backend is a choice flag of the same kind)
    bad = recipe_variant(cluster, tmp_path / "choice.yaml", extra={"linear-backend": "flashinfer_b13x"})
    code, checks, text = preflight(cluster, bad, cache)
    assert code == 1
    value = checks["vllm-flags"]["per_node"][head]["value"]
    assert "--linear-backend: invalid choice 'flashinfer_b13x' (closest: flashinfer_b12x" in value

    # num_speculative_tokens against an MTP model's n_predict=5, written into both nodes' snapshot
    config = json.dumps({**fake_model.model_config(), "n_predict": 5})
    for info in cluster.nodes():
        node = dep.inventory.node(info.name)
        cluster.exec(info.index, ["sh", "-c", REWRITE_CONFIG, "sh", node.hf_cache,
                                  fake_model.CACHE_DIR_NAME, config])
    code, checks, text = preflight(cluster, cluster.recipe_path, cache)
    assert code == 0 and "dspark drafts its own width" in checks["speculative-tokens"]["per_node"][head]["value"], text
    bad = recipe_variant(cluster, tmp_path / "spec.yaml",  # mtp: vLLM 0.33.0 checks n_predict for no dspark
                         vllm={"speculative_config": {"method": "mtp", "num_speculative_tokens": 7}})
    code, checks, text = preflight(cluster, bad, cache)
    assert code == 1
    spec = checks["speculative-tokens"]
    assert spec["status"] == "fail" and set(spec["per_node"]) == {i.name for i in cluster.nodes()}
    assert all("num_speculative_tokens=7 is not divisible by n_predict=5" in c["value"]
               for c in spec["per_node"].values())
    assert_up_refuses(cluster, bad, "speculative-tokens", head, "n_predict=5")

    # overlays: one target the image has, one it lacks; one source only on the head
    cluster.exec(1, ["sh", "-c", "echo patched > /opt/overlay-only-here.py"])
    yaml = YAML()
    doc = yaml.load(cluster.recipe_path.read_text())
    doc["mounts"]["overlays"] = [
        {"source": "/etc/os-release", "target": "/usr/lib/python3/dist-packages/orchestrator/sim/standin/jit.py"},
        {"source": "/opt/overlay-only-here.py", "target": "/usr/lib/python3/dist-packages/vllm/fused_moe.py"}]
    overlays = tmp_path / "overlays.yaml"
    with overlays.open("w") as handle:
        yaml.dump(doc, handle)
    t4 = node_now(cluster)
    code, checks, text = preflight(cluster, overlays, cache)
    t5 = node_now(cluster)
    assert code == 1
    ov = checks["overlay-targets"]
    peer = next(i.name for i in cluster.nodes() if i.name != head)
    assert ov["per_node"][head]["status"] == "fail"
    assert "target missing in the image: /usr/lib/python3/dist-packages/vllm/fused_moe.py" in \
        ov["per_node"][head]["value"]
    assert "standin/jit.py" not in ov["per_node"][head]["value"]
    assert ov["per_node"][peer] == {"status": "fail", "value": "source missing: /opt/overlay-only-here.py"}
    assert_up_refuses(cluster, overlays, "overlay-targets", peer, "/opt/overlay-only-here.py")
    assert created(cluster, t4, t5) == [image]  # the targets' one throwaway container (flags: cached)

    # nothing of ours was started by any of it, and no throwaway container stayed
    assert our_containers(cluster) == {i.name: [] for i in cluster.nodes()}
    assert all_containers(cluster) == before


def test_an_older_build_without_the_recipes_moe_backend(pair, tmp_path):
    """The recipe's moe_backend is a value vLLM 0.33.0 accepts, but the image pinned is an older build whose
    parser has no such choice: preflight judges against the image it will run, and up refuses the same way."""
    cluster = pair
    dep = load_deployment(cluster.recipe_path, cluster.inventory_path)
    head = dep.inventory.head
    wanted = dep.recipe.vllm.moe_backend
    assert wanted == "flashinfer_b12x"
    older = derive_without_choice(cluster, 1, dep.recipe.image.id, "vllm-sim:before-b12x", "--moe-backend", wanted)
    recipe = recipe_variant(cluster, tmp_path / "older.yaml", image={"id": older})
    code, checks, text = preflight(cluster, recipe, tmp_path / "xdg")
    assert code == 1, text
    cell = checks["vllm-flags"]["per_node"][head]
    assert cell["status"] == "fail", cell
    assert f"--moe-backend: invalid choice '{wanted}' (closest: " in cell["value"], cell
    assert "b12x" in cell["value"].split("(closest: ", 1)[1], cell  # the plain b12x the older build still has
    # the image the cluster was pinned to still has the choice: the same recipe on it passes
    code, checks, text = preflight(cluster, cluster.recipe_path, tmp_path / "xdg")
    assert code == 0 and checks["vllm-flags"]["status"] == "ok", text
    assert_up_refuses(cluster, recipe, "vllm-flags", head, f"invalid choice '{wanted}'")
