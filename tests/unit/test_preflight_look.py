"""preflight/look.py: up's image survey, names lookup and head listeners, read from the one gathering.

The facts send the same scripts the direct calls send (by identity) with the same arguments, and their
answers go through the same pure rules; a fact that failed on a node is an error naming that node."""

from __future__ import annotations

import json

import pytest

from fakes import IMAGE_ID, OTHER_ID, deployment, foreign, image_inspect, ours
from orchestrator.checks.basics import LISTENERS
from orchestrator.docker_cli.containers import RECIPE_OR_NAMED, either_args
from orchestrator.docker_cli.images import INSPECT_IMAGES
from orchestrator.preflight import look
from orchestrator.preflight.facts import FACTS, FactInput, Observed, driver_args, parse_framed
from orchestrator.render.plan import build_plan
from orchestrator.transport.node import NodeError


class Conn:
    def __init__(self, name: str):
        self.name = name


@pytest.fixture
def plan(tmp_path):
    return build_plan(deployment(tmp_path))


def given(plan, node: str) -> FactInput:
    return FactInput(plan.on(node).node, None, plan)


def test_the_facts_send_the_direct_calls_scripts_with_their_arguments(plan):
    assert FACTS[look.IMAGE_REFS].script is INSPECT_IMAGES and FACTS[look.FOUND].script is RECIPE_OR_NAMED
    assert FACTS[look.LISTENING].script == " ".join(LISTENERS)
    assert FACTS[look.IMAGE_REFS].args(given(plan, "spark-2")) == [plan.image_id, plan.image_ref]
    assert FACTS[look.FOUND].args(given(plan, "spark-2")) == either_args(plan.recipe, [plan.on("spark-2").container])
    argv = driver_args([FACTS[n] for n in look.NAMES], given(plan, "spark-1"))
    assert plan.on("spark-1").container in " ".join(argv) and plan.on("spark-2").container not in " ".join(argv)


def facts_of(plan, *, images: dict, found: dict, listening: str = "") -> dict:
    """Each node's three facts parsed from framed output as the driver prints it."""
    out = {}
    for node in ("spark-1", "spark-2"):
        text = "".join(json.dumps(images[node].get(ref)) + "\n" for ref in (plan.image_id, plan.image_ref))
        found_text = json.dumps([c.raw for c in found.get(node, [])])
        framed = (f"\x1eF {look.IMAGE_REFS} 0\n{text}\n\x1eE\n\x1eF {look.FOUND} 0\n{found_text}\n\x1eE\n"
                  f"\x1eF {look.LISTENING} 0\n{listening if node == 'spark-1' else ''}\n\x1eE\n")
        out[node] = parse_framed(framed, {n: FACTS[n] for n in look.NAMES})
    return out


def test_looked_gives_the_survey_the_found_containers_and_the_head_ports(plan):
    held = {plan.image_id: image_inspect(plan.image_id)}
    other = {plan.image_ref: image_inspect(OTHER_ID, layers=("sha256:" + "f" * 64,))}  # another content
    mine, theirs = ours(plan, 0), foreign(plan.on("spark-2").container)
    seen = facts_of(plan, images={"spark-1": held, "spark-2": other}, found={"spark-1": [mine], "spark-2": [theirs]},
                    listening=f"LISTEN 0 4096 0.0.0.0:{plan.ports[0]} 0.0.0.0:* users:((\"python3\",pid=9,fd=3))\n")
    got = look.looked(seen, [Conn("spark-1"), Conn("spark-2")], plan)
    assert [c.id for c in got.found["spark-1"]] == [mine.id] and [c.name for c in got.found["spark-2"]] == [theirs.name]
    assert got.image.source.conn.name == "spark-1" and [n.conn.name for n in got.image.missing] == ["spark-2"]
    assert [n.conn.name for n in got.image.conflicts] == ["spark-2"]
    assert got.ports.status == "fail" and got.ports.bad == ["spark-1"]
    assert "python3" in got.ports.evidence[f"spark-1:{plan.ports[0]}"]


def test_a_fact_that_failed_on_a_node_is_an_error_naming_that_node_and_the_reason(plan):
    seen = facts_of(plan, images={"spark-1": {plan.image_id: image_inspect(IMAGE_ID)}, "spark-2": {}}, found={})
    seen["spark-2"][look.IMAGE_REFS] = Observed(error="Cannot connect to the Docker daemon", code=1)
    with pytest.raises(NodeError, match="spark-2: docker image inspect failed: Cannot connect to the Docker daemon"):
        look.looked(seen, [Conn("spark-1"), Conn("spark-2")], plan)
    del seen["spark-1"][look.LISTENING]
    with pytest.raises(NodeError, match="spark-1: ss -Hltnpe: not gathered"):
        look.looked(seen, [Conn("spark-1"), Conn("spark-2")], plan)
