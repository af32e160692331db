"""Issue 22: `docker.shm_size` in every form the recipe accepts means to the node's real dockerd what
spark-deploy reads it as (export/quantity.docker_size_bytes, which the Kubernetes export turns into a quantity).

The recipe is rendered (the value goes into `docker run` as written); the node's own Docker then creates a
container with that `--shm-size` and says how many bytes it took. A form the recipe refuses, Docker refuses
too. (From branch `schema`, on main's helpers and the shared pair.)
"""

from __future__ import annotations

import json

import pytest
from deploy_helpers import node_docker
from ruamel.yaml import YAML

from orchestrator.config.load import load_deployment
from orchestrator.config.source import ConfigError
from orchestrator.export.quantity import docker_size_bytes
from orchestrator.render.plan import PREVIEW_RUN, build_plan
from orchestrator.sim.images_spec import VLLM_REFERENCE_TAG

pytestmark = pytest.mark.integration

FORMS = ["16g", "16GB", "16GiB", "1.5g", "512m", "64k", "17179869184"]


def _rendered_size(cluster, tmp_path, value) -> str:
    """The `--shm-size` token `up` would pass for `docker.shm_size: value` in the cluster's own recipe."""
    yaml = YAML()
    doc = yaml.load(cluster.recipe_path.read_text())
    doc.setdefault("docker", {})["shm_size"] = value
    path = tmp_path / "recipe.yaml"
    with path.open("w") as handle:
        yaml.dump(doc, handle)
    argv = list(build_plan(load_deployment(path, cluster.inventory_path), PREVIEW_RUN).ranks[0].argv)
    return argv[argv.index("--shm-size") + 1]


def test_every_size_form_means_to_dockerd_what_spark_deploy_reads(pair, tmp_path):
    names = []
    try:
        for i, form in enumerate(FORMS):
            value = _rendered_size(pair, tmp_path, form)
            name = f"sd-shm-form-{i}"
            names.append(name)
            node_docker(pair, 1, "create", "--name", name, "--shm-size", value, VLLM_REFERENCE_TAG, check=True)
            inspected = json.loads(node_docker(pair, 1, "inspect", name, check=True).stdout)[0]
            assert inspected["HostConfig"]["ShmSize"] == docker_size_bytes(value), (form, value)
        refused = node_docker(pair, 1, "create", "--shm-size", "16 gigs", VLLM_REFERENCE_TAG)
        assert refused.code != 0 and "invalid" in (refused.stderr + refused.stdout).lower()
        with pytest.raises(ConfigError, match="is not a size as Docker takes it"):
            _rendered_size(pair, tmp_path, "16 gigs")
    finally:
        if names:
            node_docker(pair, 1, "rm", "--force", *names)
