"""`restart` (issue 40): which release it brings back (pure), and the command as ONE Operation on the in-memory
connector (tests/memnode): a dead rank's group restarted whole — the survivor too — in `up`'s order, one
`restart` audit line naming the rank and its exit code; a restart that fails leaves no half group and says
what serves; refusals change nothing and let the lock go."""

from __future__ import annotations

import json
import re

import pytest

from orchestrator.deploy import restart as restart_mod
from orchestrator.deploy.restart_units import units_of
from orchestrator.facts.boot import BootUnits, UnitInfo
from orchestrator.facts.core import Observed
from orchestrator.releases import audit
from orchestrator.releases.lock import lock_path
from orchestrator.releases.serving import containers_of, restart_target
from orchestrator.render.unit import unit_name

from memnode.endpoint import endpoint_at
from memnode.harness import MemCluster, quick
from memnode.model import Fault
from memnode.node import connector
from test_release_logic import O, box, release


# ---- which release: pure -------------------------------------------------------------------------
def test_the_serving_release_is_the_one_restarted():
    containers = {"spark-1": [box("plan-b", 0)], "spark-2": [box("plan-b", 1)]}
    releases = [release(2, plan="plan-b", outcome=O.SUPERSEDED), release(1, plan="plan-a")]
    assert restart_target(releases, containers).id == 2


def test_a_dead_rank_leaves_no_release_serving_but_the_record_names_the_one_to_restart():
    containers = {"spark-1": [box("plan-b", 0)], "spark-2": [box("plan-b", 1, status="exited")]}
    releases = [release(3, plan="plan-b"), release(2, plan="plan-a", outcome=O.SUPERSEDED)]
    assert restart_target(releases, containers).id == 3
    assert {n: [c.ours.rank for c in cs] for n, cs in containers_of(releases[0], containers).items()} == {
        "spark-1": [0], "spark-2": [1]}  # the dead rank's container is one of them


def test_nothing_to_restart_after_down_or_before_any_up():
    containers = {"spark-1": [box("plan-a", 0, status="exited")], "spark-2": []}
    assert restart_target([release(1, outcome=O.STOPPED)], containers) is None
    assert restart_target([], {}) is None


# ---- the command, in memory -------------------------------------------------------------------
def restart(mem: MemCluster, recipe: str | None = None):
    return restart_mod.restart_serving(mem.inventory, str(mem.dep.inventory_path), recipe, mem.events,
                                       options=quick(), connector=connector(mem.world),
                                       endpoint_at=endpoint_at(mem.world))


def lines(mem: MemCluster) -> list[dict]:
    text = mem.node("spark-1").files.get(audit.audit_path(mem.inventory, "spark-1"), "")
    return [json.loads(line) for line in text.splitlines()]


def locked(mem: MemCluster) -> bool:
    return lock_path(mem.inventory) in mem.node(mem.inventory.head).files


def kill(mem: MemCluster, node: str, code: int = 137) -> str:
    (c,) = [c for c in mem.node(node).containers.values() if c.running]
    mem.node(node).stop(c, code=code)
    return c.id


def test_a_dead_rank_brings_its_whole_group_back_in_one_operation(mem):
    served = mem.up()
    head_started = {c.id: c.started_at for c in mem.running()["spark-1"]}
    dead = kill(mem, "spark-2")
    assert mem.serving_plan() is None
    before = len(lines(mem))

    result = restart(mem)

    assert result.release.id == served.release and [d.words() for d in result.down] == [
        "rank 1 on spark-2 exited (exit 137)"]
    assert mem.serving_plan() == served.plan_hash
    assert [c.id for c in mem.running()["spark-2"]] == [dead]  # the same container, started again
    (head,) = mem.running()["spark-1"]
    assert head.id in head_started and head.started_at != head_started[head.id]  # the survivor restarted too
    new = lines(mem)[before:]
    assert [(a["action"], a["outcome"], a.get("release")) for a in new] == [("restart", "ok", served.release)]
    assert "rank 1 on spark-2 exited (exit 137)" in new[0]["detail"]
    assert re.search(r"; rank 1 down \d+ s$", new[0]["detail"]), new[0]["detail"]  # from its stop to serving
    assert not locked(mem)


def test_a_failed_restart_stops_the_whole_group_and_names_rollback(mem):
    served = mem.up()
    kill(mem, "spark-2")
    mem.node("spark-1").faults.append(Fault.DIE_AT_START)  # the head dies at its next start

    with pytest.raises(restart_mod.RestartFailed) as failed:
        restart(mem)

    said = str(failed.value)
    assert f"nothing serves: release {served.release}'s containers are stopped" in said, said
    assert f"`spark-deploy rollback {served.release}`" in said, said
    assert mem.running() == {"spark-1": [], "spark-2": []}  # never half a group
    line = lines(mem)[-1]
    assert (line["action"], line["outcome"]) == ("restart", "failed") and "nothing serves" in line["detail"], line
    assert not locked(mem)


def test_restart_refuses_another_recipe_and_nothing_deployed(mem):
    with pytest.raises(restart_mod.RestartRefused, match="nothing to restart"):
        restart(mem)
    mem.up()
    with pytest.raises(restart_mod.RestartRefused, match="not 'other'"):
        restart(mem, "other")
    assert [(a["action"], a["outcome"]) for a in lines(mem)][-1] == ("restart", "refused")
    assert mem.serving_plan() is not None and not locked(mem)


# ---- which boot unit watched a restarted container: pure ------------------------------------------
def test_the_unit_started_again_is_ours_for_the_recipe_naming_that_container():
    name = unit_name("c1", "sim-tiny")
    ours = UnitInfo(name, f"/etc/systemd/system/{name}", ("docker start --attach sd-sim-tiny-r0-ab",),
                    recorded=(("Container", "sd-sim-tiny-r0-ab"), ("Recipe", "sim-tiny")))
    facts = {"boot_units": Observed(BootUnits(True, units=(ours,)))}
    assert units_of(facts, "c1", "sim-tiny", "sd-sim-tiny-r0-ab") == name
    assert units_of(facts, "c1", "sim-tiny", "sd-sim-tiny-r0-cd") is None  # enabled for another container
    assert units_of(facts, "c1", "other", "sd-sim-tiny-r0-ab") is None
    assert units_of({"boot_units": Observed(BootUnits(False, "no systemd"))}, "c1", "sim-tiny", "x") is None
    assert units_of({}, "c1", "sim-tiny", "x") is None
