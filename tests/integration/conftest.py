"""Fixtures for tests that run against the simulated cluster (real sshd + dockerd per node).

- ``docker_client``: the host engine; FAILS (never skips) when it is unreachable.
- ``sim_images``: session-scoped; builds the node and vllm-sim images, or reuses the cached tags.
- ``sim_cluster_factory``: ``make(nodes=2, load_image_on=(1,))`` brings up a cluster with a unique name
  and always tears down every cluster it made, even if the test or ``up`` itself failed.
- ``pair``: one 2-node cluster per test module (the image on node 1 only), torn down whatever happens.
- ``conns``: an open ``Cluster`` of ``pair``'s inventory for one test (closed after).
- ``clean``: ``pair`` for one test, which must leave no container of ours behind (``down``, then checked).
"""

from __future__ import annotations

import itertools
import os

import docker
import pytest

from orchestrator.sim import images as sim_images_mod
from orchestrator.sim.cluster import SimCluster

_counter = itertools.count(1)


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=900)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure here means "no engine"
        pytest.fail(
            "integration tests need a Docker engine (start `dockerd`, or set DOCKER_HOST); "
            f"docker.from_env() failed: {exc}",
            pytrace=False,
        )
    return client


@pytest.fixture(scope="session")
def sim_home(tmp_path_factory) -> str:
    """State dirs of test clusters go to a per-session temp dir, not the user's ~/.local/state."""
    path = str(tmp_path_factory.mktemp("sim-home"))
    old = os.environ.get("SPARK_DEPLOY_SIM_HOME")
    os.environ["SPARK_DEPLOY_SIM_HOME"] = path
    yield path
    if old is None:
        os.environ.pop("SPARK_DEPLOY_SIM_HOME", None)
    else:
        os.environ["SPARK_DEPLOY_SIM_HOME"] = old


@pytest.fixture(scope="session")
def sim_images(docker_client) -> sim_images_mod.SimImages:
    return sim_images_mod.ensure_images(docker_client)


def unique_cluster_name() -> str:
    return f"t{os.getpid()}x{next(_counter)}"


@pytest.fixture
def sim_cluster_factory(docker_client, sim_images, sim_home):
    made: list[SimCluster] = []

    def make(nodes: int = 2, load_image_on=(1,), **kw) -> SimCluster:
        cluster = SimCluster(unique_cluster_name(), client=docker_client)
        made.append(cluster)  # registered before up(): a half-made cluster is removed too
        cluster.up(nodes, load_image_on, **kw)
        return cluster

    yield make
    problems = []
    for cluster in made:
        try:
            cluster.down()
        except Exception as exc:  # noqa: BLE001 - report after trying every cluster
            problems.append(f"{cluster.name}: {exc}")
    if problems:
        pytest.fail("tearing down simulated clusters failed: " + "; ".join(problems), pytrace=False)


@pytest.fixture(scope="module")
def pair(docker_client, sim_images, sim_home):
    """One 2-node cluster for the module (bring-up is the slow part); torn down whatever happens."""
    cluster = SimCluster(unique_cluster_name(), client=docker_client)
    try:
        cluster.up(2)
        yield cluster
    finally:
        cluster.down()


@pytest.fixture
def clean(pair):
    """Every test leaves the module's cluster as it found it: no container of ours."""
    from deploy_helpers import assert_nothing_left, spark_deploy

    yield pair
    spark_deploy("down", "-i", pair.inventory_path)
    assert_nothing_left(pair)


@pytest.fixture
def conns(pair):
    from orchestrator.config.load import load_inventory
    from orchestrator.transport.group import Cluster

    inventory, _ = load_inventory(pair.inventory_path)
    cluster = Cluster(inventory).open()
    yield cluster
    cluster.close()
