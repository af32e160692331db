"""Issue 22: `down` without a recipe asks (or needs --all) when it would stop more than one recipe — run on the
in-memory nodes (tests/memnode): refused, nothing is removed and the audit says so; approved, every one goes."""

from __future__ import annotations

import json

import pytest

from orchestrator.deploy import down as down_mod
from orchestrator.releases import audit

from memnode import connector
from memnode.harness import MemCluster
import cli_json


def other_recipe(recipe: dict) -> None:
    recipe["name"] = "other"
    recipe["serve"]["port"] = 8001
    recipe["vllm"]["master_port"] = 29702


def _down(mem: MemCluster, approve):
    return down_mod.down(mem.inventory, None, mem.events, connector=connector(mem.world), approve=approve)


def _last_audit(mem: MemCluster) -> dict:
    text = mem.node("spark-1").files[audit.audit_path(mem.inventory, "spark-1")]
    return json.loads(text.splitlines()[-1])


def test_two_recipes_not_approved_nothing_is_removed(mem):
    mem.up()
    mem.up(mem.deployment(other_recipe))
    before = {n: sorted(c.id for c in cs) for n, cs in mem.running().items()}
    asked: list[list[str]] = []

    with pytest.raises(down_mod.DownRefused, match="would stop 2 running recipes"):
        _down(mem, lambda recipes: asked.append(recipes) or False)

    assert asked == [["other", "sim-tiny"]]
    assert {n: sorted(c.id for c in cs) for n, cs in mem.running().items()} == before
    line = _last_audit(mem)
    assert (line["action"], line["outcome"]) == ("down", "refused")


def test_two_recipes_approved_every_one_goes(mem):
    mem.up()
    mem.up(mem.deployment(other_recipe))
    result = _down(mem, lambda recipes: True)
    assert result.ok and mem.running() == {"spark-1": [], "spark-2": []}


def test_one_recipe_is_not_asked_about(mem):
    mem.up()
    result = _down(mem, lambda recipes: pytest.fail("asked although one recipe runs"))
    assert result.ok and mem.running() == {"spark-1": [], "spark-2": []}


def test_a_stopped_container_of_another_recipe_is_removed_without_asking(mem):
    mem.up()
    mem.up(mem.deployment(other_recipe))
    for node in mem.world.nodes.values():  # `other` stopped: down stops only sim-tiny, and removes both
        for c in node.containers.values():
            if c.labels.get("spark-deploy.recipe") == "other":
                c.state = "exited"
    result = _down(mem, lambda recipes: pytest.fail("asked although one recipe runs"))
    assert result.ok and {c.ours.recipe for _, c in result.removed} == {"sim-tiny", "other"}


@pytest.mark.parametrize("flags, code, said", [
    ([], 2, "or --all stops every one"),  # no terminal to ask on: refused, naming the way out
    (["--all"], 0, ""),
    (["--yes"], 0, ""),
    (["--json"], 2, "or --all stops every one"),  # --json is for programs: never asked
])
def test_the_cli_asks_or_needs_all(flags, code, said, monkeypatch):
    """The command line's answer to down's question (the removal itself is the scenarios' above)."""
    from pathlib import Path

    from typer.testing import CliRunner

    from orchestrator.cli import deploy_cmds
    from orchestrator.cli.main import app

    def fake_down(inventory, recipe, events, *, approve):
        if not approve(["other", "sim-tiny"]):
            raise down_mod.DownRefused(["other", "sim-tiny"])
        return down_mod.DownResult()

    monkeypatch.setattr(deploy_cmds.down_mod, "down", fake_down)
    inventory = Path(__file__).parent / "corpus" / "good-inventory.yaml"
    result = CliRunner().invoke(app, ["down", "-i", str(inventory), *flags])
    assert result.exit_code == code, result.output
    assert said in result.stderr
    if "--json" in flags:
        assert cli_json.result(result.stdout)["ok"] is False
