"""A cluster's identity, held by its nodes (releases/identity.py), on the in-memory connector: two inventories
that name the same head share one lock and one history whatever their `cluster:` names; an inventory whose
nodes (or whose `cluster_id`) say another cluster is refused before anything changes, naming both; a cluster
that has history from before identities keeps it."""

from __future__ import annotations

import dataclasses
import functools
import json
import os
import socket
import time

import pytest

from orchestrator.deploy.up import DeployFailed
from orchestrator.operation.operation import AuditAction, Observation, Operation
from orchestrator.releases.identity import Identity, IdentityMismatch, identity_path
from orchestrator.releases.lock import LockDetails, LockHeld, lock_path
from orchestrator.releases.store import releases_dir
from orchestrator.transport.group import Cluster

from memnode import connector
from memnode.harness import MemCluster

NODES = ("spark-1", "spark-2")


def held(mem: MemCluster, node: str) -> Identity | None:
    text = mem.node(node).files.get(identity_path(mem.inventory, node))
    return Identity.parse(text) if text else None


def observe(mem: MemCluster, inventory):
    with Observation(inventory, cluster_factory=functools.partial(Cluster, connector=connector(mem.world))) as seen:
        return seen.state


def operate(mem: MemCluster, inventory):
    return Operation(inventory, mem.events, AuditAction.PRUNE,
                     cluster_factory=functools.partial(Cluster, connector=connector(mem.world)))


def test_the_first_up_gives_every_node_the_identity_and_a_renamed_inventory_shares_lock_and_history(mem):
    mem.up()
    first = held(mem, "spark-1")
    assert first is not None and first.id == mem.cluster and held(mem, "spark-2") == first

    renamed = mem.inventory.model_copy(update={"cluster": "renamed"})
    state = observe(mem, renamed)
    assert [r.id for r in state.releases] == [1] and state.serving is not None and state.serving.id == 1
    assert lock_path(renamed) == lock_path(mem.inventory)
    assert releases_dir(renamed, "spark-2") == releases_dir(mem.inventory, "spark-2")

    # another command (another host's process) holds the lock taken through the first inventory's name
    other = LockDetails(owner="someone@elsewhere", host=f"not-{socket.gethostname()}", pid=os.getpid(),
                        pid_start="", command=["spark-deploy", "up", "r.yaml"], started_at=time.time(),
                        expires_at=time.time() + 600, token="t")
    mem.node("spark-1").files[lock_path(mem.inventory)] = other.to_text()
    with pytest.raises(LockHeld) as caught:
        with operate(mem, renamed):
            pytest.fail("the body ran while another command held the cluster's lock")
    assert "someone@elsewhere" in str(caught.value) and "spark-deploy up r.yaml" in str(caught.value)

    again = mem.inventory.model_copy(update={"cluster": "renamed"})
    mem.node("spark-1").files.pop(lock_path(mem.inventory))
    mem.up(dataclasses.replace(mem.dep, inventory=again))
    assert held(mem, "spark-1") == first, "a renamed inventory must not give the head another identity"
    assert [r.id for r in observe(mem, mem.inventory).releases] == [1]  # already serving: no new release


def test_a_node_of_another_cluster_is_refused_before_anything_changes_naming_both(mem):
    stranger = Identity("other", "0123456789abcdef", "other", 0.0)
    mem.node("spark-2").files[identity_path(mem.inventory, "spark-2")] = stranger.to_text()
    before = {n: dict(mem.node(n).files) for n in NODES}

    with pytest.raises(IdentityMismatch) as caught:
        with operate(mem, mem.inventory):
            pytest.fail("the body ran on a mixture of clusters")
    said = str(caught.value)
    assert "spark-2 belongs to cluster 'other'" in said and repr(mem.cluster) in said, said
    assert "nothing was changed" in said
    with pytest.raises(DeployFailed) as failed:
        mem.up()
    assert "spark-2 belongs to cluster 'other'" in str(failed.value)
    assert {n: dict(mem.node(n).files) for n in NODES} == before
    assert not any(c.running for n in NODES for c in mem.node(n).containers.values() if c.ours)


def test_an_inventory_whose_cluster_id_is_not_what_the_head_holds_is_refused(mem):
    with operate(mem, mem.inventory) as op:
        op.done("ok", "first use")
    head = held(mem, "spark-1")
    assert head is not None and head.id == mem.cluster
    wrong = mem.inventory.model_copy(update={"cluster_id": "elsewhere"})
    with pytest.raises(IdentityMismatch) as caught:
        observe(mem, wrong)
    said = str(caught.value)
    assert "cluster_id 'elsewhere'" in said and f"spark-1 belongs to cluster {head}" in said, said
    right = mem.inventory.model_copy(update={"cluster": "a-label", "cluster_id": mem.cluster})
    assert observe(mem, right).history is not None


def test_history_from_before_identities_is_adopted_by_the_first_command(mem):
    mem.up()
    for node in NODES:  # as a spark-deploy without identities left it: name-keyed records, no identity
        mem.node(node).files.pop(identity_path(mem.inventory, node))
    assert [r.id for r in observe(mem, mem.inventory).releases] == [1]
    with operate(mem, mem.inventory) as op:
        op.done("ok", "first run under identities")
    assert held(mem, "spark-1").id == mem.cluster == held(mem, "spark-2").id
    assert [r.id for r in observe(mem, mem.inventory).releases] == [1]
    lines = mem.node("spark-1").files[f"{mem.inventory.node('spark-1').state_dir}/audit/{mem.cluster}.jsonl"]
    assert [json.loads(l)["detail"] for l in lines.splitlines()][-1] == "first run under identities"


def test_a_damaged_identity_is_refused_by_node_and_path_and_never_becomes_a_path(mem):
    path = identity_path(mem.inventory, "spark-2")
    assert Identity.parse(json.dumps({"id": "../etc", "token": "t", "name": "x", "created_at": 0})) is None
    mem.node("spark-2").files[path] = '{"id": "../etc", "token": "t", "name": "x", "created_at": 0}'
    with pytest.raises(IdentityMismatch) as caught:
        observe(mem, mem.inventory)
    assert f"spark-2: {path} is not a cluster identity" in str(caught.value)


def test_a_head_that_lost_its_identity_takes_its_peers_back(mem):
    mem.up()
    kept = held(mem, "spark-2")
    mem.node("spark-1").files.pop(identity_path(mem.inventory, "spark-1"))  # a wiped state dir on the head
    with operate(mem, mem.inventory) as op:
        op.done("ok", "after the wipe")
    assert held(mem, "spark-1") == kept
