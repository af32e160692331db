"""Operation's lifecycle (operation/operation.py) on the in-memory connector: the lock it takes or reuses,
the reachability policy refusing before anything is locked, and the one audit line every way out writes.

Every command the Operation sends (the lock's scripts, the state read, the audit append) is answered by
the node's model (tests/memnode), so what these tests look at is the head's lock file and audit file.
"""

from __future__ import annotations

import functools
import json

import pytest

from orchestrator.operation.operation import AuditAction, Operation, OperationRefused, Reach, held_lock
from orchestrator.releases import audit, lock
from orchestrator.releases.lock import lock_path
from orchestrator.transport.group import Cluster
from orchestrator.transport.result import NodeError

from memnode import connector
from memnode.harness import MemCluster


def operation(mem: MemCluster, conns, action=AuditAction.PRUNE, **kwargs) -> Operation:
    """An Operation on `mem`'s world through the connector `conns` (which keeps every connection made)."""
    return Operation(mem.inventory, mem.events, action, cluster_factory=functools.partial(Cluster, connector=conns),
                     **kwargs)


def sent(conns, constant: str) -> int:
    """How many times a script constant was sent, over every connection `conns` made."""
    return sum(1 for conn in conns.made for c in conn.commands if c is constant)


def lock_file(mem: MemCluster) -> str | None:
    return mem.node(mem.inventory.head).files.get(lock_path(mem.inventory))


def audit_lines(mem: MemCluster, node: str = "spark-1") -> list[dict]:
    text = mem.node(node).files.get(audit.audit_path(mem.inventory, node), "")
    return [json.loads(line) for line in text.splitlines()]


def test_a_nested_operation_is_a_part_of_the_outer_one_its_lock_its_connections_its_audit_line(mem):
    made = connector(mem.world)
    with operation(mem, made, AuditAction.MAINTENANCE_END) as outer:
        taken = lock_file(mem)
        opened = len(made.made)
        assert taken is not None and held_lock(mem.inventory) is outer.lock
        with operation(mem, made, AuditAction.PRUNE) as inner:
            assert inner.lock is outer.lock and inner.cluster is outer.cluster and inner.state is not outer.state
            inner.done("ok", "inner", release=3)
        assert lock_file(mem) == taken, "the inner operation left the outer's lock in place"
        assert len(made.made) == opened and all(c.is_open for c in outer.alive), "no connection made or closed"
        outer.done("ok", "outer")
    assert lock_file(mem) is None
    assert sent(made, lock._CREATE) == 1 and sent(made, lock._RELEASE) == 1
    assert held_lock(mem.inventory) is None
    lines = audit_lines(mem)
    assert [(a["action"], a["detail"]) for a in lines] == [("maintenance-end", "outer")]
    assert lines[0]["parts"] == [{"action": "prune", "outcome": "ok", "detail": "inner", "release": 3}]


def test_reach_all_refuses_naming_the_unreachable_node_before_taking_the_lock(mem):
    mem.node("spark-2").unreachable = "connection refused"
    made = connector(mem.world)
    with pytest.raises(OperationRefused) as caught:
        with operation(mem, made, reach=Reach.ALL):
            pytest.fail("the body ran with a node unreachable")
    said = str(caught.value)
    assert caught.value.nodes == ["spark-2"] and "spark-2" in said and "connection refused" in said, said
    assert "nothing was changed" in said
    assert sent(made, lock._CREATE) == 0 and lock_file(mem) is None
    assert audit_lines(mem) == [] and audit_lines(mem, "spark-2") == []


def test_an_exception_in_the_body_writes_one_failed_audit_line_with_nodes_and_causes(mem):
    made = connector(mem.world)
    with pytest.raises(RuntimeError):
        with operation(mem, made) as op:
            op.done("ok", "half way")
            try:
                raise NodeError("spark-2", "docker rm: permission denied")
            except NodeError as exc:
                raise RuntimeError("could not remove release 1's containers") from exc
    for node in ("spark-1", "spark-2"):
        [line] = audit_lines(mem, node)
        assert (line["action"], line["outcome"]) == ("prune", "failed"), line
        assert line["nodes"] == {"spark-2": "spark-2: docker rm: permission denied"}, line
        assert line["causes"] == ["could not remove release 1's containers", "spark-2: docker rm: permission denied"]
        assert line["detail"] == "half way; could not remove release 1's containers"
    assert lock_file(mem) is None and sent(made, lock._RELEASE) == 1


def test_a_keyboard_interrupt_writes_interrupted_and_releases_the_lock(mem):
    made = connector(mem.world)
    with pytest.raises(KeyboardInterrupt):
        with operation(mem, made):
            assert lock_file(mem) is not None
            raise KeyboardInterrupt
    [line] = audit_lines(mem)
    assert (line["action"], line["outcome"]) == ("prune", "interrupted"), line
    assert line["causes"] == ["KeyboardInterrupt"]
    assert lock_file(mem) is None and sent(made, lock._RELEASE) == 1
    assert held_lock(mem.inventory) is None
