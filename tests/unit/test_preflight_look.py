"""facts/look.py: up's image survey, names lookup and head listeners, read from the one gathering.

The facts send the same scripts the direct calls send (by identity) with the same arguments, and their
answers go through the same pure rules; a fact that failed on a node is an error naming that node."""

from __future__ import annotations

import json

import pytest

from fakes import IMAGE_ID, OTHER_ID, deployment, foreign, image_inspect, ours
from orchestrator.checks.basics import LISTENERS
from orchestrator.docker_cli.containers import RECIPE_OR_NAMED, either_args
from orchestrator.docker_cli.images import INSPECT_IMAGES
from orchestrator.facts import look
from orchestrator.facts.core import FACTS, FactInput, Observed, driver_args, parse_framed
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
    assert FACTS[look.FOUND].args(given(plan, "spark-2"))[2:] == [plan.on("spark-2").container]
    assert either_args(plan.recipe, ["x"])[:2] == FACTS[look.FOUND].args(given(plan, "spark-2"))[:2]
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
    assert got.ports.status == "fail" and got.ports.failed_nodes() == ["spark-1"]
    assert f"{plan.ports[0]} " in got.ports.cells["spark-1"].value and "python3" in got.ports.cells["spark-1"].value


def test_a_fact_that_failed_on_a_node_is_an_error_naming_that_node_and_the_reason(plan):
    seen = facts_of(plan, images={"spark-1": {plan.image_id: image_inspect(IMAGE_ID)}, "spark-2": {}}, found={})
    seen["spark-2"][look.IMAGE_REFS] = Observed(error="Cannot connect to the Docker daemon", code=1)
    with pytest.raises(NodeError, match="spark-2: docker image inspect failed: Cannot connect to the Docker daemon"):
        look.looked(seen, [Conn("spark-1"), Conn("spark-2")], plan)
    del seen["spark-1"][look.LISTENING]
    with pytest.raises(NodeError, match="spark-1: ss -Hltnpe: not gathered"):
        look.looked(seen, [Conn("spark-1"), Conn("spark-2")], plan)


FAKE_DOCKER = r'''#!/bin/bash
# ps: the ids under label filters; container inspect: the known ones as an array, "No such container" for others
if [ "$1" = ps ]; then printf '%s\n' $PS_IDS; exit 0; fi
[ -n "$DAEMON_DOWN" ] && { echo "[]"; echo "Cannot connect to the Docker daemon at unix:///var/run/docker.sock" >&2; exit 1; }
shift 2; out=(); rc=0
for ref in "$@"; do
  case " $KNOWN " in *" $ref "*) out+=("{\"Id\": \"$ref\", \"Name\": \"/$ref\"}") ;;
  *) echo "Error: No such container: $ref" >&2; rc=1 ;; esac
done
(IFS=,; echo "[${out[*]}]"); exit $rc
'''


def run_either(tmp_path, *names: str, ps: str = "", known: str = "", down: bool = False):
    import os
    import subprocess
    (tmp_path / "docker").write_text(FAKE_DOCKER)
    (tmp_path / "docker").chmod(0o755)
    env = {**os.environ, "PATH": f"{tmp_path}:{os.environ['PATH']}", "PS_IDS": ps, "KNOWN": known,
           "DAEMON_DOWN": "1" if down else ""}
    return subprocess.run(["bash", "-c", RECIPE_OR_NAMED, "x", *either_args("sim-tiny", list(names))],
                          capture_output=True, text=True, env=env, check=False)


def test_the_names_lookup_is_one_inspect_where_a_name_nobody_holds_is_no_error(tmp_path):
    from orchestrator.docker_cli.containers import of_recipe_or_named, parse_inspect
    r = run_either(tmp_path, "sd-a", "sd-free", ps="c1 sd-a", known="c1 sd-a")
    assert r.returncode == 0, r.stderr
    found = parse_inspect(r.stdout)
    assert [c.id for c in found] == ["c1", "sd-a", "sd-a"]  # by label, then by name: docker lists it twice
    assert [c.name for c in of_recipe_or_named(found, "sim", "sim-tiny", ["sd-a", "sd-free"])] == ["sd-a"]
    assert run_either(tmp_path, "sd-free").returncode == 0 and parse_inspect(run_either(tmp_path, "sd-free").stdout) == []


def test_the_names_lookup_fails_with_dockers_words_when_the_engine_does_not_answer(tmp_path):
    r = run_either(tmp_path, "sd-a", ps="", down=True)
    assert r.returncode == 1 and "Cannot connect to the Docker daemon" in r.stderr


def test_a_container_found_by_label_and_by_name_is_listed_once(plan):
    mine = ours(plan, 0)
    assert of_recipe_or_named_once(mine) == [mine.id]


def of_recipe_or_named_once(c) -> list[str]:
    from orchestrator.docker_cli.containers import of_recipe_or_named
    return [x.id for x in of_recipe_or_named([c, c], c.ours.cluster, c.ours.recipe, [c.name])]
