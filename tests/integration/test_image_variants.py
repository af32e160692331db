"""derive_image on a real simulated node, measured with disk_usage over a real SSH NodeConnection."""

from __future__ import annotations

import pytest
from deploy_helpers import image_inspect, node_docker
from image_variants import MB, derive_image

from orchestrator.config.load import load_inventory
from orchestrator.docker_cli.disk import disk_usage
from orchestrator.sim.images import VLLM_REFERENCE_TAG
from orchestrator.sim.state import SimError
from orchestrator.transport.group import Cluster

pytestmark = pytest.mark.integration

EXTRA_MB = 16
TOLERANCE = 0.03  # docker system df prints 4 significant digits; the layer adds a few kB of metadata


def test_derived_image_is_new_and_disk_usage_follows_it(bare_peer):
    cluster = bare_peer
    assert VLLM_REFERENCE_TAG == "vllm-sim:latest"
    base = image_inspect(cluster, 1, VLLM_REFERENCE_TAG)
    assert base is not None, "sim up loads vllm-sim:latest on node 1"
    inventory, _ = load_inventory(cluster.inventory_path)
    with Cluster(inventory).open() as conns:
        conn = conns[cluster.node(1).name]
        before = disk_usage(conn)

        image_id = derive_image(cluster, 1, VLLM_REFERENCE_TAG, "vllm-sim:variant", extra_mb=EXTRA_MB)

        made = image_inspect(cluster, 1, "vllm-sim:variant")
        assert image_id.startswith("sha256:") and made["Id"] == image_id
        assert image_id != base["Id"]
        assert made["RootFS"]["Layers"][:-1] == base["RootFS"]["Layers"]  # same lower layers, one more on top
        for key in ("Entrypoint", "Cmd", "Env"):
            assert made["Config"][key] == base["Config"][key], key
        assert image_inspect(cluster, 1, VLLM_REFERENCE_TAG)["Id"] == base["Id"]  # the base tag did not move
        left = node_docker(cluster, 1, "ps", "--all", "--quiet", check=True).stdout.split()
        assert left == [], f"temporary container left: {left}"
        blobs = cluster.exec(1, ["sh", "-c", "ls /tmp | grep sd-variant || true"]).stdout.split()
        assert blobs == [], f"blob file left: {blobs}"

        grown = disk_usage(conn)
        added = grown.total - before.total
        assert abs(added - EXTRA_MB * MB) <= TOLERANCE * EXTRA_MB * MB, (before, grown)
        assert grown.by_type["Images"] - before.by_type["Images"] == added  # nothing else changed
        assert grown.counts["Images"] == before.counts["Images"] + 1

        node_docker(cluster, 1, "rmi", "vllm-sim:variant", check=True)
        after = disk_usage(conn)
        assert abs(after.total - before.total) <= TOLERANCE * EXTRA_MB * MB, (before, after)
        assert after.counts["Images"] == before.counts["Images"]
        assert image_inspect(cluster, 1, image_id) is None

        other = disk_usage(conns[cluster.node(2).name])  # node 2 never had an image: untouched
        assert other.by_type["Images"] == 0 and other.counts["Images"] == 0
        with pytest.raises(SimError, match=r"node 2: no image 'vllm-sim:latest'"):
            derive_image(cluster, 2, VLLM_REFERENCE_TAG, "vllm-sim:variant")
        assert disk_usage(conns[cluster.node(2).name]) == other

