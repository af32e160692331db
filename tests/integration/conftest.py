"""Fixtures for tests that run against the simulated cluster (real sshd + dockerd per node).

The session fixtures (``docker_client``, ``sim_images``, ``sim_home``, ``shared_pair``,
``shared_systemd_pair``) live in tests/conftest.py. Here:

- ``pair``: the session's shared 2-node cluster, lent to one test: reset to how it was made before and
  after the test, and checked (tests/shared_clusters.py). The stand-in image is on both nodes;
  ``bare_peer`` removes it from spark-2 first, for tests about moving it; ``roce_pair`` gives both nodes a
  Spark's HCA (`sim fault all roce`) for the test.
- ``clean``: the same loan, for tests written against the old per-module cluster.
- ``systemd_pair``: the shared systemd cluster, lent the same way.
- ``conns``: an open ``Cluster`` of ``pair``'s inventory for one test (closed after).
- ``sim_cluster_factory``: ``make(nodes=2, load_image_on=(1,))`` for a test that truly needs its own
  cluster (4 nodes, a node that is removed, a reboot that must not touch the shared one); always torn down.
"""

from __future__ import annotations

import itertools
import os

import pytest

from background import Background

from orchestrator.sim.cluster import SimCluster

_counter = itertools.count(1)


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


@pytest.fixture
def pair(shared_pair, request):
    """The shared 2-node cluster for this test, clean before and checked after."""
    with shared_pair.lend(request.node.nodeid) as cluster:
        yield cluster


@pytest.fixture
def clean(pair):
    return pair


@pytest.fixture
def bare_peer(pair):
    """``pair`` with spark-2 holding no image (the reset loads it back after the test). An ID is listed once
    per tag, and one the engine is still letting go of (an interrupted load the reset waited out) can
    answer "No such image" while it is listed: remove them one by one until none is listed, bounded."""
    for _ in range(5):
        ids = sorted(set(pair.exec(2, ["docker", "image", "ls", "-aq"]).stdout.split()))
        if not ids:
            return pair
        for image in ids:
            gone = pair.exec(2, ["docker", "image", "rm", "-f", image], check=False)
            if gone.code != 0 and "No such image" not in gone.stderr and "unrecognized image" not in gone.stderr:
                raise AssertionError(f"spark-2: docker image rm -f {image}: {gone.stderr.strip()}")
    raise AssertionError(f"spark-2 still lists images after five rounds of removal: {ids}")


@pytest.fixture
def roce_pair(pair):
    """The shared pair with a Spark's HCA on both nodes (taken away again; the reset checks that)."""
    pair.fault("all", "roce")
    try:
        yield pair
    finally:
        pair.fault("all", "roce", remove="true")


@pytest.fixture
def systemd_pair(shared_systemd_pair, request):
    with shared_systemd_pair.lend(request.node.nodeid) as cluster:
        yield cluster


@pytest.fixture
def conns(pair):
    from orchestrator.config.load import load_inventory
    from orchestrator.transport.group import Cluster

    inventory, _ = load_inventory(pair.inventory_path)
    cluster = Cluster(inventory).open()
    yield cluster
    cluster.close()


@pytest.fixture
def background():
    """Every background command a test starts is killed at the end, whatever happened."""
    started: list[Background] = []

    def start(*args, **kw) -> Background:
        run = Background(*args, **kw)
        started.append(run)
        return run

    yield start
    for run in started:
        run.kill()
