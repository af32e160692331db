"""Issue 7, acceptance 2: image-sync conflict rules (docker_cli/image_sync.survey).

Each fake node answers the survey's `docker image inspect` with what its engine holds under the pinned ID
and under the recipe's reference (fakes.FakeNode: JSON per ref, `null` for none), shaped like
`docker image inspect --format '{{json .}}'` captured on a simulated node.
"""

from __future__ import annotations

import pytest

from fakes import IMAGE_ID, LAYERS, OTHER_ID, FakeNode, image_inspect
from orchestrator.docker_cli.image_sync import survey
from orchestrator.transport.group import GroupError

REF = "vllm-sim:latest"
DIGEST_REF = "ghcr.io/anemll/dspark-vllm-gx10@sha256:" + "a8" * 32
PINNED = image_inspect(IMAGE_ID)
# The same image as another storage backend reports it (containerd snapshotter): another ID, same layers.
SAME_CONTENT = image_inspect("sha256:" + "c0" * 32, layers=LAYERS)
DIFFERENT = image_inspect(OTHER_ID, layers=("sha256:" + "9f" * 32,))


def holds(name: str, *, pinned: dict | None = None, under_ref: dict | None = None, ref: str = REF) -> FakeNode:
    images = {}
    if pinned is not None:
        images[IMAGE_ID] = pinned
    if under_ref is not None:
        images[ref] = under_ref
    return FakeNode(name, images)


def names(nodes) -> list[str]:
    return [n.conn.name for n in nodes]


def test_every_node_holds_the_pinned_image():
    nodes = [holds("spark-1", pinned=PINNED, under_ref=PINNED), holds("spark-2", pinned=PINNED, under_ref=PINNED)]
    plan = survey(nodes, IMAGE_ID, REF)
    assert plan.in_sync and names([plan.source]) == ["spark-1"]
    assert plan.missing == [] and plan.conflicts == []
    assert [n.pinned.id for n in plan.nodes] == [IMAGE_ID, IMAGE_ID]


def test_a_node_without_it_is_missing_and_the_holder_is_the_source():
    nodes = [holds("spark-1"), holds("spark-2", pinned=PINNED, under_ref=PINNED), holds("spark-3")]
    plan = survey(nodes, IMAGE_ID, REF)
    assert names([plan.source]) == ["spark-2"]
    assert names(plan.missing) == ["spark-1", "spark-3"] and plan.conflicts == []
    assert not plan.in_sync


def test_no_node_holds_it():
    plan = survey([holds("spark-1"), holds("spark-2")], IMAGE_ID, REF)
    assert plan.source is None and names(plan.missing) == ["spark-1", "spark-2"] and plan.conflicts == []


def test_a_different_image_under_the_reference_is_a_conflict():
    """Field note 1: `vllm-sim:latest` on the peer is another build; it is not silently replaced."""
    nodes = [holds("spark-1", pinned=PINNED, under_ref=PINNED), holds("spark-2", under_ref=DIFFERENT)]
    plan = survey(nodes, IMAGE_ID, REF)
    assert names(plan.conflicts) == ["spark-2"] and names(plan.missing) == ["spark-2"]
    assert plan.conflicts[0].by_ref.id == OTHER_ID


def test_a_conflict_is_seen_even_when_the_node_also_holds_the_pinned_id():
    nodes = [holds("spark-1", pinned=PINNED, under_ref=PINNED), holds("spark-2", pinned=PINNED, under_ref=DIFFERENT)]
    plan = survey(nodes, IMAGE_ID, REF)
    assert names(plan.conflicts) == ["spark-2"] and plan.missing == []


def test_the_same_layers_under_another_id_are_no_conflict():
    """Storage backends disagree on .Id; the ordered layer DiffIDs say it is the same image."""
    nodes = [holds("spark-1", pinned=PINNED, under_ref=PINNED), holds("spark-2", pinned=PINNED, under_ref=SAME_CONTENT)]
    plan = survey(nodes, IMAGE_ID, REF)
    assert plan.conflicts == [] and plan.in_sync


def test_a_different_image_under_the_reference_with_no_source_is_still_a_conflict():
    plan = survey([holds("spark-1", under_ref=DIFFERENT)], IMAGE_ID, REF)
    assert plan.source is None and names(plan.conflicts) == ["spark-1"]


def test_the_reference_untagged_on_a_holder_is_no_conflict():
    nodes = [holds("spark-1", pinned=PINNED, under_ref=PINNED), holds("spark-2", pinned=image_inspect(tags=()))]
    plan = survey(nodes, IMAGE_ID, REF)
    assert plan.in_sync and plan.nodes[1].by_ref is None  # `up` tags it afterwards


def test_a_digest_reference_is_not_inspected_by_reference():
    """A RepoDigest does not survive `docker load` and cannot be re-created with `docker tag`."""
    nodes = [holds("spark-1", pinned=PINNED, under_ref=DIFFERENT, ref=DIGEST_REF), holds("spark-2")]
    plan = survey(nodes, IMAGE_ID, DIGEST_REF)
    assert plan.conflicts == [] and names(plan.missing) == ["spark-2"]
    for node in nodes:
        assert [args for _script, args in node.calls] == [(IMAGE_ID,)]


def test_a_node_whose_engine_does_not_answer_is_named():
    nodes = [holds("spark-1", pinned=PINNED),
             FakeNode("spark-2", broken="Cannot connect to the Docker daemon at unix:///var/run/docker.sock")]
    with pytest.raises(GroupError) as caught:
        survey(nodes, IMAGE_ID, REF)
    assert list(caught.value.failures) == ["spark-2"]
    assert "spark-2" in str(caught.value) and "Docker daemon" in str(caught.value)


@pytest.mark.parametrize("ref", [REF, DIGEST_REF])
def test_each_node_is_asked_once_for_everything(ref):
    nodes = [holds("spark-1", pinned=PINNED), holds("spark-2")]
    survey(nodes, IMAGE_ID, ref)
    assert all(len(node.calls) == 1 for node in nodes)  # one round trip per node
