"""Issue 7, acceptance 2: the plan hash is the identity of "this exact launch".

It changes with everything that shapes what runs (image ID, any vLLM argument, a per-node env value in the
inventory, a mount, the env-file path / secrets list) and with nothing that does not (the description,
log-expectation patterns, the run ID). Labels render to pairs and parse back; a container without the
managed label is not ours.
"""

from __future__ import annotations

import pytest

from fakes import IMAGE_ID, OTHER_ID, container_inspect, deployment
from orchestrator.docker_cli.containers import container_of, current_of
from orchestrator.render.labels import ContainerLabels, Label
from orchestrator.render.plan import build_plan


def _peer_env(key: str, value: str):
    def edit(inv: dict) -> None:
        inv["nodes"][1].setdefault("env", {})[key] = value
    return edit


def _recipe(path: tuple, value):
    def edit(recipe: dict) -> None:
        tree = recipe
        for part in path[:-1]:
            tree = tree.setdefault(part, {})
        tree[path[-1]] = value
    return edit


CHANGES = {
    "image ID": dict(recipe=_recipe(("image", "id"), OTHER_ID)),
    "max_model_len": dict(recipe=_recipe(("vllm", "max_model_len"), 2048)),
    "gpu_memory_utilization": dict(recipe=_recipe(("vllm", "gpu_memory_utilization"), 0.75)),
    "speculative tokens": dict(recipe=_recipe(("vllm", "speculative_config", "num_speculative_tokens"), 3)),
    "an extra vLLM flag": dict(recipe=_recipe(("vllm", "extra", "max-num-seqs"), 8)),
    "model revision": dict(recipe=_recipe(("model", "revision"), "0123abc")),
    "serve port": dict(recipe=_recipe(("serve", "port"), 8001)),
    "recipe env": dict(recipe=_recipe(("env", "SIM_DECODE_TPS"), "41")),
    "NCCL_IB_GID_INDEX on the peer only": dict(inventory=_peer_env("NCCL_IB_GID_INDEX", "5")),
    "NCCL_DEBUG on the peer only": dict(inventory=_peer_env("NCCL_DEBUG", "WARN")),
    "the fabric's gid_index": dict(inventory=lambda inv: inv["interconnect"].update(gid_index=1)),
    "the peer's hf_cache (a mount source)": dict(
        inventory=lambda inv: inv["nodes"][1].update(hf_cache="/data/huggingface")),
    "an extra mount": dict(recipe=_recipe(("mounts", "extra"),
                                          [{"source": "/opt/patch", "target": "/patch", "read_only": True}])),
    "a mount made writable": dict(recipe=_recipe(("mounts", "extra"),
                                                 [{"source": "/opt/patch", "target": "/patch", "read_only": False}])),
    "the secrets list": dict(recipe=_recipe(("secrets",), ["HF_TOKEN"])),
    "the peer's head address (master addr)": dict(
        inventory=lambda inv: inv["nodes"][0].update(fabric_ip="192.168.100.9")),
}

SAME = {
    "description": dict(recipe=_recipe(("description",), "another description entirely")),
    "expect line pattern": dict(recipe=_recipe(("expect", "lines"), [
        {"name": "moe-backend", "pattern": "Using '(?P<value>[^']+)' Mxfp4 MoE backend\\.", "contains": "B12X_MXFP4"}])),
    "expect identical pattern": dict(recipe=_recipe(("expect", "identical"), [
        {"name": "cuda-graph-profile", "pattern": "Profiling CUDA graph memory: (?P<value>.+)"}])),
    "the peer's ssh port (how we reach it, not what runs)": dict(
        inventory=lambda inv: inv["nodes"][1].update(ssh={"port": 2222})),
}


@pytest.fixture
def base(tmp_path):
    return build_plan(deployment(tmp_path), "run-a")


@pytest.mark.parametrize("what", sorted(CHANGES))
def test_what_shapes_the_launch_changes_the_hash(tmp_path, base, what):
    changed = build_plan(deployment(tmp_path, **CHANGES[what]), "run-a")
    assert changed.plan_hash != base.plan_hash, f"{what} changed what runs but not the plan hash"
    assert [r.labels.plan_hash for r in changed.ranks] == [changed.plan_hash] * len(changed.ranks)


@pytest.mark.parametrize("what", sorted(SAME))
def test_what_does_not_shape_the_launch_keeps_the_hash(tmp_path, base, what):
    same = build_plan(deployment(tmp_path, **SAME[what]), "run-a")
    assert same.plan_hash == base.plan_hash, f"{what} does not change what runs, but changed the plan hash"


def test_the_description_changes_the_recipe_digest_but_not_the_plan(tmp_path, base):
    """The digest stays as provenance (descriptions included); identity is the plan hash."""
    edited = build_plan(deployment(tmp_path, **SAME["description"]), "run-a")
    assert edited.recipe_digest != base.recipe_digest
    assert edited.plan_hash == base.plan_hash


def test_the_run_id_is_a_label_not_part_of_the_identity(tmp_path):
    dep = deployment(tmp_path)
    a, b = build_plan(dep, "run-a"), build_plan(dep, "run-b")
    assert a.plan_hash == b.plan_hash
    assert a.head.argv != b.head.argv  # the run label differs...
    assert f"{Label.RUN}=run-b" in b.head.argv  # ...and is on the container
    assert build_plan(dep).run_id != build_plan(dep).run_id  # a fresh ID per `up`


def test_the_secrets_env_file_path_is_part_of_the_identity(tmp_path):
    """With secrets, moving the node's state_dir moves the env-file Docker reads."""
    with_secrets = _recipe(("secrets",), ["HF_TOKEN"])
    a = build_plan(deployment(tmp_path, recipe=with_secrets), "r")
    b = build_plan(deployment(tmp_path, recipe=with_secrets,
                              inventory=lambda inv: inv["nodes"][1].update(state_dir="/srv/spark-deploy")), "r")
    assert a.ranks[1].env_file != b.ranks[1].env_file
    assert a.plan_hash != b.plan_hash


def test_the_hash_is_stable_and_carried_on_every_rank(tmp_path):
    first, again = build_plan(deployment(tmp_path), "x"), build_plan(deployment(tmp_path), "y")
    assert first.plan_hash == again.plan_hash
    assert len(first.plan_hash) == 16 and int(first.plan_hash, 16) >= 0
    for launch in first.ranks:
        assert f"{Label.PLAN_HASH}={first.plan_hash}" in launch.argv
    assert first.image_id == IMAGE_ID


# ---- labels --------------------------------------------------------------------------------------
def test_labels_render_to_pairs_and_parse_back(base):
    for launch in base.ranks:
        pairs = launch.labels.pairs()
        assert pairs[0] == (str(Label.MANAGED), "true")
        assert len({k for k, _ in pairs}) == len(pairs)
        assert ContainerLabels.parse(dict(pairs)) == launch.labels
        for key, value in pairs:  # every pair reaches `docker run` as one token
            assert f"{key}={value}" in launch.argv
    assert base.ranks[1].labels.rank == 1 and base.ranks[1].labels.node == "spark-2"


def test_labels_survive_a_round_trip_through_inspect(base):
    """What `docker container inspect` gives back (Config.Labels, other labels mixed in) parses to ours."""
    labels = dict(base.head.labels.pairs()) | {"org.opencontainers.image.title": "vllm", "spark-deploy.sim.kind": "vllm"}
    found = container_of(container_inspect(base.head.container, labels))
    assert found.ours == base.head.labels
    assert found.name == base.head.container and found.running and current_of([found]) == [found]


@pytest.mark.parametrize("labels", [None, {}, {"maintainer": "ops"}, {str(Label.MANAGED): "false"},
                                    {str(Label.RECIPE): "sim-tiny", str(Label.RANK): "0"}])
def test_a_container_without_the_managed_label_is_not_ours(labels):
    assert ContainerLabels.parse(labels) is None
    assert container_of(container_inspect("sd-sim-tiny-r0", labels)).ours is None


def test_a_container_of_an_older_spark_deploy_parses_with_empty_values():
    old = ContainerLabels.parse({str(Label.MANAGED): "true", str(Label.RECIPE): "sim-tiny", str(Label.RANK): "0"})
    assert old is not None and old.recipe == "sim-tiny" and old.rank == 0
    assert old.plan_hash == "" and old.run == "" and old.serve_port == -1
