"""The rest of maintenance's pure logic: which copy of the baseline wins, what `--stop` stops and the name
it keeps, when `end` refuses without --yes, and the commands' help."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.docker_cli.containers import container_of
from orchestrator.window import store
from orchestrator.window.baseline import Baseline, GpuSeen, NodeFacts, WindowState
from orchestrator.maintenance.diff import compare
from orchestrator.maintenance.end import refusal
from orchestrator.releases.serving import running_of
from orchestrator.maintenance.window import VerifyResult
from orchestrator.releases.record import ModelSeen, RankRecord, Release


def baseline(updated: float = 10.0, **changes) -> Baseline:
    b = Baseline(cluster="c", recipe="tiny", recipe_text="name: tiny\n", by="me@here", command=["spark-deploy"],
                 opened_at=5.0, updated_at=updated, release=3, plan_hash="p3", reason="driver update",
                 nodes={"spark-1": NodeFacts(node="spark-1")})
    return b.model_copy(update=changes)


def test_the_newest_copy_wins_and_the_others_are_named():
    old, new = baseline(10.0), baseline(20.0, state=WindowState.CLOSED)
    found = store.newest({"spark-1": new, "spark-2": old, "spark-3": None, "spark-4": ValueError("unreadable: x")})
    assert found.baseline == new and found.holders == ["spark-1"]
    assert set(found.problems) == {"spark-2", "spark-3", "spark-4"} and "unreadable" in found.problems["spark-4"]
    assert store.newest({"spark-1": None}).baseline is None


def test_a_copy_round_trips_and_garbage_is_refused_not_ignored():
    b = baseline()
    assert store.parse_copy(b.to_json()) == b
    assert store.parse_copy("MISSING\n") is None
    with pytest.raises(ValueError, match="unreadable baseline"):
        store.parse_copy('{"cluster": "c"}')


def _container(name: str, plan: str, status: str = "running", run: str = "20261201T000000Z-abc") -> object:
    labels = {"spark-deploy.managed": "true", "spark-deploy.cluster": "c", "spark-deploy.recipe": "tiny",
              "spark-deploy.recipe-hash": "r", "spark-deploy.plan-hash": plan, "spark-deploy.run": run,
              "spark-deploy.rank": name[-1], "spark-deploy.world": "2", "spark-deploy.node": "n",
              "spark-deploy.serve-port": "8000", "spark-deploy.master-port": "29500",
              "spark-deploy.served-model": "tiny"}
    return container_of({"Id": f"{name}-id" + "0" * 52, "Name": f"/{name}", "State": {"Status": status},
                         "Config": {"Labels": labels}})


def _release(plan: str) -> Release:
    return Release(id=3, cluster="c", recipe="tiny", recipe_text="", recipe_digest="d", inventory_digest="i",
                   plan_hash=plan, run_id="run", container_run="run", image_id="sha256:x", image_ref="x",
                   ranks=[RankRecord(rank=0, node="spark-1", container="sd-tiny-r0", argv=[])],
                   model=ModelSeen(repo="r", revision="main"), by="me", command=[], started_at=1, updated_at=1)


def test_stop_takes_only_the_running_containers_of_the_release_and_keeps_them_as_up_does():
    r0, other, old = _container("sd-tiny-r0", "p3"), _container("sd-tiny-r1", "p9"), _container("sd-tiny-r1", "p3", "exited")
    picked = running_of(_release("p3"), {"spark-1": [r0], "spark-2": [other, old]})
    assert picked == {"spark-1": [r0]}


def _verify(base: Baseline, serving: Release | None, **gpu_after) -> VerifyResult:
    gpu = GpuSeen(name="GB10", driver="580.159.03", cuda="13.0", clock=3003, max_clock=3003)
    before = {"spark-2": NodeFacts(node="spark-2", gpu=gpu)}
    after = {"spark-2": NodeFacts(node="spark-2", gpu=gpu.model_copy(update=gpu_after))}
    return VerifyResult(base, after, compare(before, after), serving)


def test_end_refuses_a_blocking_change_or_another_release_serving_and_goes_on_otherwise():
    assert refusal(_verify(baseline(), None)) is None
    assert refusal(_verify(baseline(), _release("p3"))) is None  # still serves: nothing to refuse
    why = refusal(_verify(baseline(), None, driver="580.165.02"))
    assert "driver 580.159.03 → 580.165.02 on spark-2 (must re-check flags)" in why and "vllm-flags" in why
    why = refusal(_verify(baseline(), _release("p9")))
    assert "serves now, not the baseline's release 3" in why
    assert "nothing served at begin" in refusal(_verify(baseline(release=None, plan_hash=None), _release("p9")))


@pytest.mark.parametrize("command", ["begin", "verify", "end"])
def test_each_maintenance_command_has_an_example(command):
    result = CliRunner().invoke(app, ["maintenance", command, "--help"])
    assert result.exit_code == 0 and "Example" in result.output, result.output
