"""Issue 7, acceptance 2: deploy/down.teardown_order removes the peers (together) before the head."""

from __future__ import annotations

import pytest

from orchestrator.deploy.down import teardown_order


@pytest.mark.parametrize("nodes, head, groups", [
    (["spark-1", "spark-2"], "spark-1", [["spark-2"], ["spark-1"]]),
    (["spark-2", "spark-1"], "spark-1", [["spark-2"], ["spark-1"]]),  # the head last, whatever its position
    (["a", "b", "c", "d"], "c", [["a", "b", "d"], ["c"]]),  # peers together, in inventory order
    (["spark-1"], "spark-1", [["spark-1"]]),  # a single node
    (["spark-2", "spark-3"], "spark-1", [["spark-2", "spark-3"]]),  # head unreachable or holding nothing
    ([], "spark-1", []),  # nothing found anywhere: no empty group
])
def test_peers_before_the_head(nodes, head, groups):
    assert teardown_order(nodes, head) == groups


def test_every_node_appears_exactly_once():
    nodes = [f"n{i}" for i in range(8)]
    groups = teardown_order(nodes, "n5")
    assert sorted(n for g in groups for n in g) == sorted(nodes)
    assert groups[-1] == ["n5"] and all(groups)
