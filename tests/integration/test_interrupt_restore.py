"""Issue 35, item 3: Ctrl-C during `up`'s load, then Ctrl-C again during the automatic restore.

The first interrupt says what happens next (undo release 2, then start release 1 again); the second stops the
restore within a bound and exits 130; `history` then calls no release serving that does not generate, and
the one command printed to repair it serves again."""

from __future__ import annotations

import shlex
import signal
import time

import pytest

from deploy_helpers import completion, forget_releases, recipe_variant, spark_deploy
import cli_json

pytestmark = pytest.mark.integration

NODES = ("spark-1", "spark-2")
SECOND_INTERRUPT_BOUND = 30.0  # seconds from the second SIGINT to the exit: the stop is bounded (5 s + SSH)


def generates(cluster) -> bool:
    try:
        return bool(completion(cluster) is not None)
    except OSError:  # refused, reset, timed out: it does not generate
        return False


def history(cluster) -> list[dict]:
    result = spark_deploy("history", "-i", cluster.inventory_path, "--json")
    assert result.returncode == 0, result.stderr + result.stdout
    return cli_json.result(result.stdout)


def test_second_ctrl_c_during_the_restore_leaves_a_truthful_state_and_one_repair_command(pair, tmp_path, background):
    cluster = pair
    forget_releases(cluster)
    # release 1 loads for a few seconds: its restore is still loading when the second interrupt lands
    a = recipe_variant(cluster, tmp_path / "a.yaml", env={"SIM_LOAD_SECONDS": "4"})
    first = spark_deploy("up", a, "-i", cluster.inventory_path, timeout=240)
    assert first.returncode == 0, first.stderr + first.stdout
    b = recipe_variant(cluster, tmp_path / "b.yaml", env={"SIM_LOAD_SECONDS": "60"}, vllm={"max_model_len": 2048})

    run = background("up", b, "-i", cluster.inventory_path, "--json", events=True)
    run.wait_for(lambda e: e.get("event") == "phase-start" and e.get("phase") == "ready")  # release 2 loads
    run.proc.send_signal(signal.SIGINT)
    said = run.wait_for(lambda e: e.get("event") == "warning" and "interrupted: undoing" in e.get("message", ""))
    assert said["message"] == ("interrupted: undoing release 2, then starting release 1 again — Ctrl-C again to "
                               "stop the restore"), said
    run.wait_for(lambda e: e.get("event") == "phase-start" and e.get("phase") == "restore")
    # release 1's peer is started again: both its ranks run, loading, and it does not generate yet
    run.wait_for(lambda e: e.get("event") == "container-restarted" and e.get("node") == "spark-2")
    run.proc.send_signal(signal.SIGINT)
    sent = time.monotonic()
    code = run.finish(timeout=120)
    took = time.monotonic() - sent
    stderr = run.stderr()
    assert code == 130, stderr
    assert took < SECOND_INTERRUPT_BOUND, f"the second interrupt took {took:.1f} s to stop the restore"
    assert "Traceback" not in stderr, stderr

    assert run.envelope is not None and run.envelope["error"]["code"] == "interrupted", run.raw[-3:]
    result = run.envelope["result"]
    repair = result["repair"]
    assert repair == f"spark-deploy rollback 1 -i {shlex.quote(str(cluster.inventory_path))}", result
    assert stderr.count(repair) == 1, stderr  # one printed command, once
    assert "RESTORE INTERRUPTED" in stderr, stderr

    records = history(cluster)
    serving = generates(cluster)
    for r in records:
        assert not r["serving"] or serving, ("called serving but does not generate", r)
        assert r["outcome"] != "serving" or serving, ("recorded serving but does not generate", r)
    by_id = {r["id"]: r for r in records}
    assert by_id[2]["outcome"] == "failed" and by_id[2]["restore_failed"] == "interrupted", by_id[2]
    assert by_id[1]["outcome"] == "stopped", by_id[1]
    status = spark_deploy("status", "-i", cluster.inventory_path, "--json", "--no-probe")
    assert not [d for d in cli_json.result(status.stdout)["deployments"] if d.get("ok")], status.stdout

    argv = shlex.split(repair)
    assert argv[0] == "spark-deploy"
    fixed = spark_deploy(*argv[1:], timeout=240)
    assert fixed.returncode == 0, fixed.stderr + fixed.stdout
    assert generates(cluster)
    records = history(cluster)
    assert [r["id"] for r in records if r["serving"]] == [3] and records[0]["rollback_of"] == 1, records
