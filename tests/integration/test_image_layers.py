"""Issue 21, acceptance 3: an image copy moves only the layers the target lacks (real sshd, real dockerd 20.10,
the real fabric network between the nodes). B = A + one small layer is built on spark-1; spark-2 holds A
(the shared pair's stand-in image) or nothing. Bytes are counted twice: in the pipe (what `docker load`
on spark-2 received, as the image-moved event reports it) and on spark-2's fabric interface (the kernel's
own count of what arrived over the link between the nodes). The pair's login (`spark`, docker group)
cannot read the engine's layer store, so its copies are `docker save` cut by the filter; logged in as root
the source writes the archive from its store (docs/distribution-images.md)."""

from __future__ import annotations

import cli_json

import pytest
from ruamel.yaml import YAML

from orchestrator.config.load import load_inventory
from orchestrator.docker_cli import image_sync as sync
from orchestrator.docker_cli.images import inspect_image
from orchestrator.docker_cli.layers import Producer
from orchestrator.sim.cluster import SimCluster
from orchestrator.sim.images import VLLM_REFERENCE_TAG
from orchestrator.sim.state import FABRIC_IFACE
from orchestrator.transport.group import Cluster

from deploy_helpers import image_inspect, recipe_variant, spark_deploy
from image_variants import MB, derive_image

pytestmark = pytest.mark.integration

EXTRA_MB = 4


def fabric_rx(cluster: SimCluster, node: int) -> int:
    return int(cluster.exec(node, ["cat", f"/sys/class/net/{FABRIC_IFACE}/statistics/rx_bytes"]).stdout)


def size(cluster: SimCluster, node: int, ref: str) -> int:
    return image_inspect(cluster, node, ref)["Size"]


def make_b(cluster: SimCluster, tag: str) -> tuple[str, int]:
    """B on spark-1 and the size of the layer it adds to A (docker's content size of that layer)."""
    image_id = derive_image(cluster, 1, VLLM_REFERENCE_TAG, tag, extra_mb=EXTRA_MB)
    added = size(cluster, 1, image_id) - size(cluster, 1, VLLM_REFERENCE_TAG)
    assert EXTRA_MB * MB <= added < EXTRA_MB * MB + 100_000, added
    return image_id, added


def test_up_of_b_onto_a_node_holding_a_moves_only_the_new_layer(pair, tmp_path):
    cluster = pair
    image_id, added = make_b(cluster, "vllm-sim:layers-b")
    assert image_inspect(cluster, 2, image_id) is None and image_inspect(cluster, 2, VLLM_REFERENCE_TAG) is not None
    recipe = recipe_variant(cluster, tmp_path / "b.yaml")
    yaml = YAML()
    doc = yaml.load(recipe.read_text())
    doc["image"]["ref"], doc["image"]["id"] = "vllm-sim:layers-b", image_id
    with recipe.open("w") as handle:
        yaml.dump(doc, handle)

    rx = fabric_rx(cluster, 2)
    result = spark_deploy("up", recipe, "-i", cluster.inventory_path, "--json")
    on_link = fabric_rx(cluster, 2) - rx
    assert result.returncode == 0, result.stderr + result.stdout
    moved = [e for e in cli_json.events(result.stdout) if e["event"] == "image-moved"]
    assert len(moved) == 1 and moved[0]["node"] == "spark-2", moved
    assert added <= moved[0]["bytes"] < added + MB, (moved[0]["bytes"], added)
    assert on_link < added + MB, f"{on_link} bytes arrived on spark-2's fabric for a {added}-byte layer"
    assert "only the 1 of" in moved[0]["route"], moved[0]
    assert "docker save, cut on spark-1" in moved[0]["route"], "the `spark` login reads no store: filtered save"
    assert image_inspect(cluster, 2, image_id)["Id"] == image_id
    assert image_inspect(cluster, 2, "vllm-sim:layers-b")["Id"] == image_id


@pytest.fixture
def root_conns(pair):
    """The pair logged into as root (the sim provisions root's keys too): root reads the engine's layer
    store, so the source writes the archive itself; the default login (`spark`, docker group) cannot."""
    inventory, _ = load_inventory(pair.inventory_path)
    cluster = Cluster(inventory.model_copy(update={"ssh": inventory.ssh.model_copy(update={"user": "root"})})).open()
    yield cluster
    cluster.close()


def copy(conns, image_id: str, mode: sync.TransferMode) -> sync.Moved:
    src, dst = conns.head, conns.peers[0]
    return sync.copy_image(src, dst, image_id, inspect_image(src, image_id),
                           dst_host=conns.inventory.node(dst.name).fabric_ip, dst_user=conns.inventory.ssh.user,
                           mode=mode)


def test_b_onto_a_relayed_from_the_source_store_moves_only_the_new_layer(pair, root_conns):
    """The other writer (the store, as root) on the other route (relayed: counted in this process's pump);
    the `up` test above covers `docker save` cut by the filter, node to node."""
    image_id, added = make_b(pair, "vllm-sim:layers-relay")
    moved = copy(root_conns, image_id, sync.TransferMode.RELAY)
    assert moved.producer is Producer.STORE and moved.layers.archive is sync.Archive.LAYERS, moved
    assert added <= moved.bytes < added + MB, moved
    assert moved.left_out >= size(pair, 1, VLLM_REFERENCE_TAG), "A's layers stayed on spark-1"
    assert image_inspect(pair, 2, image_id)["Id"] == image_id


def test_an_empty_target_gets_the_whole_image_and_a_holder_gets_nothing(bare_peer, root_conns):
    cluster, conns = bare_peer, root_conns
    image_id, _ = make_b(cluster, "vllm-sim:layers-full")
    whole = size(cluster, 1, image_id)
    rx = fabric_rx(cluster, 2)
    moved = copy(conns, image_id, sync.TransferMode.DIRECT)
    assert moved.layers.archive is sync.Archive.FULL and moved.layers.held == 0, moved.layers
    assert moved.producer is Producer.STORE, "logged in as root, the source reads its own store"
    assert moved.bytes >= whole and fabric_rx(cluster, 2) - rx >= whole, (moved.bytes, whole)
    assert moved.identity.id == image_id == image_inspect(cluster, 2, image_id)["Id"]

    rx = fabric_rx(cluster, 2)
    again = copy(conns, image_id, sync.TransferMode.DIRECT)
    assert again.layers.archive is sync.Archive.NOTHING and again.bytes == 0
    assert fabric_rx(cluster, 2) - rx < 100_000, "nothing crosses the link for an image the target holds"
