"""deploy/boot.py's decisions, pure: which release `boot enable` may pin, what it must turn off first, and
which unit files are ours. Facts come from the captured systemd 252 samples; containers from fakes."""

from __future__ import annotations

from pathlib import Path

import pytest
from fakes import deployment, foreign, ours
from test_boot_facts import our_lines, policy_line, seen_of

from orchestrator.deploy.boot import (
    BootRefused,
    Looked,
    _serving_matches,
    conflicts_for,
    our_units,
)
from orchestrator.facts.boot import ItemKind, parse_boot_units
from orchestrator.releases.record import ModelSeen, RankRecord, Release, ReleaseOutcome
from orchestrator.render.plan import build_plan
from orchestrator.render.unit import unit_name

SAMPLES = Path(__file__).parent / "samples"


def release(plan, rid: int = 3) -> Release:
    return Release(id=rid, cluster=plan.cluster, recipe=plan.recipe, recipe_text="", recipe_digest="d",
                   inventory_digest="i", plan_hash=plan.plan_hash, run_id=plan.run_id, container_run=plan.run_id,
                   image_id=plan.image_id, image_ref=plan.image_ref,
                   ranks=[RankRecord(rank=r.rank, node=r.node.name, container=r.container, argv=list(r.argv))
                          for r in plan.ranks], model=ModelSeen(repo="m", revision="main"), by="t", command=[],
                   started_at=1.0, updated_at=1.0, outcome=ReleaseOutcome.SERVING)


@pytest.fixture
def plan(tmp_path):
    return build_plan(deployment(tmp_path))


def looked(plan, units: dict[str, str], lines: dict[str, list[str]], serving=True) -> Looked:
    containers = {r.node.name: [ours(plan, r.rank)] for r in plan.ranks}
    return Looked(release(plan) if serving else None, containers, seen_of(units, lines))


def test_conflicts_name_other_stacks_not_our_own_unit(plan):
    lines = our_lines(plan)
    lines["spark-2"].append(policy_line("legacy", {}, policy="unless-stopped", ref="other/vllm:old"))
    text = (SAMPLES / "boot_units_systemd252.txt").read_text()
    view = looked(plan, {"spark-1": (SAMPLES / "boot_units_engine_disabled.txt").read_text(), "spark-2": text}, lines)
    found = conflicts_for(view, plan, unit_name(plan.cluster, plan.recipe))
    names = sorted((c.node, c.item.kind, c.item.name) for c in found)
    assert names == [("spark-2", ItemKind.CONTAINER, "legacy"), ("spark-2", ItemKind.UNIT, "multiline-stack.service"),
                     ("spark-2", ItemKind.UNIT, "old-vllm.service"), ("spark-2", ItemKind.UNIT, "stack-compose.service")]
    assert "spark-2: unit old-vllm.service (comes back but is another stack: starts /usr/bin/docker run" in \
        next(c.describe() for c in found if c.item.name == "old-vllm.service")


def test_serving_must_be_this_recipes_plan(plan, tmp_path):
    text = (SAMPLES / "boot_units_engine_disabled.txt").read_text()
    units = {"spark-1": text, "spark-2": text}
    release_seen, names = _serving_matches(looked(plan, units, our_lines(plan)), plan)
    assert release_seen.id == 3 and names == {l.node.name: l.container for l in plan.ranks}
    with pytest.raises(BootRefused, match="nothing serves on unit-pair"):
        _serving_matches(looked(plan, units, our_lines(plan), serving=False), plan)

    def other(r):
        r["env"]["SIM_DECODE_TPS"] = "41"

    other_plan = build_plan(deployment(tmp_path, other))
    with pytest.raises(BootRefused, match=f"renders plan {other_plan.plan_hash}, but release 3"):
        _serving_matches(looked(plan, units, our_lines(plan)), other_plan)


def test_the_serving_container_is_found_by_its_labels_not_its_name(plan):
    text = (SAMPLES / "boot_units_engine_disabled.txt").read_text()
    view = looked(plan, {"spark-1": text, "spark-2": text}, our_lines(plan))
    view.containers["spark-2"] = [foreign(plan.ranks[1].container)]
    with pytest.raises(BootRefused, match="spark-2: 0 running containers serve rank 1"):
        _serving_matches(view, plan)
    view.containers["spark-2"] = [ours(plan, 1, name="sd-sim-tiny-r1")]  # as an older spark-deploy named it
    assert _serving_matches(view, plan)[1]["spark-2"] == "sd-sim-tiny-r1"


def test_our_units_by_cluster_and_recipe():
    units = parse_boot_units((SAMPLES / "boot_units_systemd252.txt").read_text())
    assert our_units(units, "unit-pair", None) == ["spark-deploy-unit-pair-old-recipe.service",
                                                   "spark-deploy-unit-pair-sim-tiny.service"]
    assert our_units(units, "unit-pair", "sim-tiny") == ["spark-deploy-unit-pair-sim-tiny.service"]
    assert our_units(units, "other-cluster", None) == []
    assert our_units(parse_boot_units((SAMPLES / "boot_units_notpid1.txt").read_text()), "unit-pair", None) == []


def test_without_systemd_names_the_node(plan):
    units = {"spark-1": (SAMPLES / "boot_units_engine_disabled.txt").read_text(),
             "spark-2": (SAMPLES / "boot_units_notpid1.txt").read_text()}
    view = looked(plan, units, our_lines(plan))
    assert view.without_systemd() == {"spark-2": "not a systemd node (PID 1 is docker-init, not systemd)"}
