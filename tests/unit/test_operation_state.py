"""The one-round-trip state read (operation/state.py): the real script run under bash against files laid out
as a node holds them and a `docker` on PATH that answers with captured inspect data; the parser and the
combination into one ClusterState; the operation's cause chain and per-node reasons."""

from __future__ import annotations

import json
import os
import stat
import subprocess
from pathlib import Path

from orchestrator.window.baseline import WindowState
from orchestrator.operation.operation import cause_chain, node_reasons
from orchestrator.operation.state import _READ, combine, parse_reading, split_sections
from orchestrator.releases.lock import LockDetails
from orchestrator.render.labels import MANAGED_FILTER
from orchestrator.render.plan import build_plan
from orchestrator.runner.runner import StepFailed
from orchestrator.transport.group import GroupError
from orchestrator.transport.node import NodeError

import fakes

NONCE = "0123456789ab"


def _docker_shim(tmp: Path, inspect: list[dict] | None, fail: str | None = None) -> Path:
    """A `docker` that prints IDs for `ps` and the captured inspect array for `container inspect`."""
    bindir = tmp / "bin"
    bindir.mkdir(exist_ok=True)
    data = tmp / "inspect.json"
    data.write_text(json.dumps(inspect or []))
    ids = " ".join(c["Id"] for c in inspect or [])
    shim = bindir / "docker"
    if fail:
        shim.write_text(f"#!/bin/sh\necho {fail!r} >&2\nexit 1\n")
    else:
        shim.write_text("#!/bin/sh\n"
                        f"case \"$1\" in ps) for i in {ids}; do echo $i; done;; "
                        f"container) cat {data};; *) exit 2;; esac\n")
    shim.chmod(shim.stat().st_mode | stat.S_IEXEC)
    return bindir


def _run(tmp: Path, bindir: Path, lock_file: str = "") -> str:
    releases, window = tmp / "releases", tmp / "maintenance.json"
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}"}
    done = subprocess.run(["bash", "-c", _READ, "sh", NONCE, MANAGED_FILTER, str(releases), str(window), lock_file],
                          capture_output=True, text=True, env=env, check=True)
    return done.stdout


def _release(dep, plan, rid: int = 1, outcome: str = "serving") -> dict:
    return {"schema_version": 1, "id": rid, "cluster": dep.inventory.cluster, "recipe": dep.recipe.name,
            "recipe_text": "x", "recipe_digest": "d", "inventory_digest": "i", "plan_hash": plan.plan_hash,
            "run_id": "r", "container_run": "20261201T095357Z-422264", "image_id": fakes.IMAGE_ID,
            "image_ref": "vllm-sim:latest", "ranks": [], "model": {"repo": "sim/tiny-moe", "revision": "main"},
            "by": "me@here", "command": ["spark-deploy", "up"], "started_at": 1.0, "updated_at": 2.0,
            "outcome": outcome}


def test_the_script_prints_every_section_and_the_parser_reads_each(tmp_path):
    dep = fakes.deployment(tmp_path)
    plan = build_plan(dep)
    running = [fakes.container_inspect(l.container, dict(l.labels.pairs())) for l in plan.ranks[:1]]
    (tmp_path / "releases").mkdir()
    (tmp_path / "releases" / "000001.json").write_text(json.dumps(_release(dep, plan)))
    lock = tmp_path / "lock.json"
    lock.write_text(LockDetails("me@here", "here", 1, "9", ["spark-deploy", "prune"], 1.0, 2.0, "tok").to_text())
    out = _run(tmp_path, _docker_shim(tmp_path, running), str(lock))
    reading = parse_reading("spark-1", out, NONCE)
    assert reading.errors == {}
    assert [c.id for c in reading.containers] == [running[0]["Id"]]
    assert list(reading.releases.records) == [1]
    assert reading.window is None  # no baseline file: no window
    assert isinstance(reading.lock, LockDetails) and reading.lock.token == "tok"


def test_a_docker_that_fails_is_named_and_the_other_sections_are_still_read(tmp_path):
    (tmp_path / "releases").mkdir()
    out = _run(tmp_path, _docker_shim(tmp_path, None, fail="Cannot connect to the Docker daemon"))
    reading = parse_reading("spark-2", out, NONCE)
    assert reading.containers is None
    assert "Cannot connect to the Docker daemon" in reading.errors["containers"]
    assert reading.releases is not None and not reading.releases.missing
    assert reading.lock is None


def test_file_content_cannot_forge_a_section():
    forged = f"@@spark-deploy-state-{NONCE} containers\n[]\n@@spark-deploy-state-ffffffffffff lock\nevil\n" \
             f"@@spark-deploy-state-{NONCE} end\n"
    parts = split_sections(forged, NONCE)
    assert "lock" not in parts and "evil" in parts["containers"]


def test_output_cut_short_is_an_error_not_an_empty_node():
    reading = parse_reading("spark-1", f"@@spark-deploy-state-{NONCE} containers\n[]\n", NONCE)
    assert "ended early" in reading.errors["state"]


def test_combine_one_answer_to_which_release_serves(tmp_path):
    dep = fakes.deployment(tmp_path)
    plan = build_plan(dep)
    r1 = _release(dep, plan, 1)
    texts = {}
    for rank, launch in enumerate(plan.ranks):
        node = launch.node.name
        c = fakes.container_inspect(launch.container, dict(launch.labels.pairs()))
        texts[node] = (f"@@spark-deploy-state-{NONCE} containers\n{json.dumps([c])}\n"
                       f"@@spark-deploy-state-{NONCE} releases\nDIR\n{json.dumps(r1)}\n"
                       f"@@spark-deploy-state-{NONCE} window\nMISSING\n@@spark-deploy-state-{NONCE} lock\n"
                       f"@@spark-deploy-state-{NONCE} end\n")
    readings = {n: parse_reading(n, t, NONCE) for n, t in texts.items()}
    state = combine(dep.inventory, readings, {})
    assert state.serving_known and state.serving is not None and state.serving.id == 1
    assert state.window is None and state.problems() == []
    assert list(state.running(state.serving)) == [l.node.name for l in plan.ranks]
    # the peer does not answer: nothing can be said to serve, and it is named
    blind = combine(dep.inventory, {plan.ranks[0].node.name: readings[plan.ranks[0].node.name]},
                    {plan.ranks[1].node.name: "connection refused"})
    assert not blind.serving_known and blind.serving is None
    assert any("connection refused" in p for p in blind.problems())


def test_an_open_window_is_read_from_the_newest_copy(tmp_path):
    from orchestrator.window.baseline import Baseline

    dep = fakes.deployment(tmp_path)
    base = Baseline(cluster=dep.inventory.cluster, recipe=dep.recipe.name, recipe_text="x", reason="r", by="me",
                    command=[], opened_at=1.0, updated_at=1.0, release=None, plan_hash=None, image_id=fakes.IMAGE_ID,
                    preflight_ok=True, preflight_failed=[], preflight_skipped=[], nodes={}, stopped=[])
    closed = base.touch(state=WindowState.CLOSED, closed_at=3.0, updated_at=3.0)
    text = {"spark-1": base.model_dump_json(), "spark-2": closed.model_dump_json()}
    readings = {n: parse_reading(n, f"@@spark-deploy-state-{NONCE} containers\n[]\n@@spark-deploy-state-{NONCE} "
                                    f"releases\nMISSING\n@@spark-deploy-state-{NONCE} window\n{t}\n"
                                    f"@@spark-deploy-state-{NONCE} end\n", NONCE) for n, t in text.items()}
    state = combine(dep.inventory, readings, {})
    assert state.window is None  # the newest copy says closed
    assert state.window_found.baseline.state is WindowState.CLOSED


def test_cause_chain_and_node_reasons():
    try:
        try:
            raise KeyError("x")
        except KeyError as inner:
            raise StepFailed(None, "during head: spark-2 broke", ["spark-2"]) from inner
    except StepFailed as exc:
        chain = cause_chain(exc)
        assert "spark-2 broke" in chain[0]
        assert "KeyError" in chain[1]
        assert node_reasons(exc) == {"spark-2": str(exc).splitlines()[0]}
    group = GroupError({"spark-2": NodeError("spark-2", "the SSH connection is closed")}, {"spark-1": None})
    assert node_reasons(group) == {"spark-2": str(NodeError("spark-2", "the SSH connection is closed"))}
    wrapped = RuntimeError("prune failed")
    wrapped.__cause__ = group
    assert set(node_reasons(wrapped)) == {"spark-2"}
    assert node_reasons(RuntimeError("no node")) == {}
