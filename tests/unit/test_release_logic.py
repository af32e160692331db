"""Pure logic of releases (issue 9): records, reconciling node copies, the lock's staleness rule, which
release serves, rollback targets, prune's choices, the audit merge, model revisions, rollback's compare.

Fakes only at the Docker level: containers are `docker container inspect` elements (fakes.container_inspect)
carrying labels rendered by ContainerLabels.pairs(); node reads are the stdout the node's script prints.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time

import pytest
from pydantic import ValidationError

from orchestrator.checks.model_cache import parse_revision
from orchestrator.deploy.prune import to_remove
from orchestrator.releases.serving import kept_releases
from orchestrator.deploy.rollback import _unlabelled, compare
from orchestrator.docker_cli.containers import Container, container_of
from orchestrator.releases import lock
from orchestrator.releases.audit import merge
from orchestrator.releases.lock import LockDetails, stale_reason
from orchestrator.releases.record import ModelSeen, RankRecord, Release, ReleaseOutcome
from orchestrator.releases.serving import rollback_target, serving_plans, serving_release
from orchestrator.releases.store import NodeCopy, parse_copy, reconcile
from orchestrator.render.labels import ContainerLabels
from orchestrator.render.plan import build_plan

from fakes import IMAGE_ID, container_inspect, deployment

O = ReleaseOutcome
CLUSTER = "unit-pair"


# ---- builders ----------------------------------------------------------------------------------
def release(rid: int, *, plan: str = "plan-a", outcome: ReleaseOutcome = O.SERVING, updated_at: float | None = None,
            run: str | None = None, **changes) -> Release:
    """A complete record, as `up` writes it (two ranks, secrets by name)."""
    data = dict(
        id=rid, cluster=CLUSTER, recipe="sim-tiny", recipe_text="name: sim-tiny\n", recipe_digest="5014bb6b0e04",
        inventory_digest="inv-1", plan_hash=plan, run_id=run or f"run-{rid}", container_run=run or f"run-{rid}",
        image_id=IMAGE_ID, image_ref="vllm-sim:latest", diff_ids=["sha256:aa"],
        ranks=[RankRecord(rank=0, node="spark-1", container="sd-sim-tiny-r0", argv=["docker", "run", "img"]),
               RankRecord(rank=1, node="spark-2", container="sd-sim-tiny-r1", argv=["docker", "run", "img"])],
        model=ModelSeen(repo="sim/tiny-moe", revision="main", per_node={"spark-1": "c" * 40, "spark-2": "c" * 40}),
        secrets=["HF_TOKEN"], by="ops@controller", command=["spark-deploy", "up", "r.yaml"],
        started_at=1000.0 + rid, updated_at=1000.0 + rid if updated_at is None else updated_at, outcome=outcome)
    data.update(changes)
    return Release(**data)


def box(plan: str, rank: int, *, world: int = 2, status: str = "running", cluster: str = CLUSTER,
        run: str = "run-1", name: str | None = None) -> Container:
    """A container of ours, as inspected, with the labels `up` renders."""
    labels = ContainerLabels(cluster=cluster, recipe="sim-tiny", recipe_digest="5014bb6b0e04", plan_hash=plan,
                             run=run, rank=rank, world=world, node=f"spark-{rank + 1}", serve_port=8000,
                             master_port=29701, served_model="tiny")
    return container_of(container_inspect(name or f"sd-sim-tiny-r{rank}", dict(labels.pairs()), status=status))


def foreign(name: str = "sd-sim-tiny-r1", status: str = "running", labels: dict | None = None) -> Container:
    return container_of(container_inspect(name, labels or {"maintainer": "ops"}, status=status))


def record_line(r: Release) -> str:
    """One record file as write_release writes it."""
    return json.dumps(r.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))


# ---- record ------------------------------------------------------------------------------------
@pytest.mark.parametrize("changes, text", [
    (dict(outcome=O.SERVING), "serving"),
    (dict(outcome=O.FAILED, failed_phase="ready", restored=2), "failed in ready (release 2 serves again)"),
    (dict(outcome=O.FAILED, failed_phase="ready"), "failed in ready"),
    (dict(outcome=O.FAILED, failed_phase="launch", restore_failed="rank 1 exited 1"),
     "failed in launch (restore FAILED)"),
    (dict(outcome=O.FAILED), "failed"),
    (dict(outcome=O.SUPERSEDED, replaced_by=4), "superseded by 4"),
    (dict(outcome=O.SUPERSEDED), "superseded"),
    (dict(outcome=O.ROLLED_BACK, replaced_by=5), "rolled back by 5"),
    (dict(outcome=O.STOPPED, replaced_by=5), "stopped"),
    (dict(outcome=O.ABANDONED), "abandoned"),
])
def test_outcome_text(changes, text):
    assert release(3, **changes).outcome_text() == text


def test_content_hash_follows_content():
    a = release(1)
    assert a.content_hash() == release(1).content_hash()
    assert len(a.content_hash()) == 16
    assert a.content_hash() != release(1, outcome=O.SUPERSEDED).content_hash()
    assert a.content_hash() != release(1, cause="x").content_hash()
    assert a.content_hash() != release(1, updated_at=5000.0).content_hash()


def test_touch_updates_updated_at_and_applies_changes_without_changing_the_original():
    a = release(1, updated_at=1.0)
    before = time.time()
    b = a.touch(outcome=O.SUPERSEDED, replaced_by=2)
    assert b.updated_at >= before
    assert (b.outcome, b.replaced_by) == (O.SUPERSEDED, 2)
    assert (a.updated_at, a.outcome, a.replaced_by) == (1.0, O.SERVING, None)


def test_release_round_trips_through_json():
    a = release(7, outcome=O.FAILED, failed_phase="ready", restored=6, cause="unknown flag --bogus",
                log_checks=[{"name": "moe-backend", "ok": True}], bench={"tps": 41.5}, finished_at=1010.5)
    back = Release.model_validate(json.loads(a.to_json()))
    assert back == a
    assert back.outcome is O.FAILED
    assert isinstance(back.ranks[1], RankRecord) and back.model.per_node == a.model.per_node
    assert back.content_hash() == a.content_hash()


def test_release_refuses_unknown_keys():
    data = json.loads(release(1).to_json())
    with pytest.raises(ValidationError, match="token"):
        Release.model_validate({**data, "token": "x"})
    data["ranks"][0]["env"] = {"HF_TOKEN": "x"}
    with pytest.raises(ValidationError):
        Release.model_validate(data)


# ---- store: parse_copy -------------------------------------------------------------------------
def test_parse_copy_missing_dir():
    copy = parse_copy("spark-2", "MISSING\n")
    assert copy.missing and not copy.records and copy.error is None
    assert parse_copy("spark-2", "").missing  # no output at all: nothing is there


def test_parse_copy_empty_dir_is_not_missing():
    copy = parse_copy("spark-1", "DIR\n")
    assert not copy.missing and copy.records == {} and copy.corrupt == []


def test_parse_copy_records_and_a_corrupt_line_named_not_fatal():
    r1, r2 = release(1, outcome=O.SUPERSEDED, replaced_by=2), release(2)
    bad_schema = json.dumps({**json.loads(record_line(r1)), "id": 3, "extra": 1})
    stdout = "DIR\n" + "\n".join([record_line(r1), "", "{this is not json", bad_schema, record_line(r2), ""]) + "\n"
    copy = parse_copy("spark-1", stdout)
    assert not copy.missing
    assert copy.records == {1: r1, 2: r2}
    assert len(copy.corrupt) == 2
    assert copy.corrupt[0].startswith("{this is not json")
    assert "extra" in copy.corrupt[1] or "validation error" in copy.corrupt[1]


# ---- store: reconcile --------------------------------------------------------------------------
def test_reconcile_agreeing_copies():
    r1, r2 = release(1, outcome=O.SUPERSEDED), release(2)
    h = reconcile([NodeCopy("spark-1", {1: r1, 2: r2}), NodeCopy("spark-2", {1: r1, 2: r2})])
    assert [r.id for r in h.releases] == [2, 1]  # newest first
    assert h.disagreements == {} and h.behind == {}
    assert h.next_id == 3 and h.get(1) == r1 and h.get(9) is None


def test_reconcile_newest_updated_at_wins_and_names_the_older_and_the_lacking_node():
    old2 = release(2, updated_at=2000.0)
    new2 = old2.model_copy(update={"outcome": O.SUPERSEDED, "replaced_by": 3, "updated_at": 3000.0})
    r1, r3 = release(1, outcome=O.SUPERSEDED), release(3)
    copies = [NodeCopy("spark-1", {1: r1, 2: new2, 3: r3}), NodeCopy("spark-2", {1: r1, 2: old2})]
    h = reconcile(copies)
    assert h.get(2) == new2
    assert h.behind == {"spark-2": [3, 2]}
    notes = h.disagreements["spark-2"]
    assert any("lacks release(s) 3" in n for n in notes)
    assert any("older copy of release(s) 2" in n for n in notes)
    assert "spark-1" not in h.disagreements
    # the winner does not depend on which node was read first
    assert reconcile(list(reversed(copies))).get(2) == new2


def test_reconcile_tie_on_updated_at_is_decided_the_same_either_way():
    a = release(1, cause="a")
    b = release(1, cause="b")
    assert a.updated_at == b.updated_at
    one = reconcile([NodeCopy("n1", {1: a}), NodeCopy("n2", {1: b})])
    two = reconcile([NodeCopy("n2", {1: b}), NodeCopy("n1", {1: a})])
    assert one.get(1) == two.get(1)
    loser = "n1" if one.get(1) == b else "n2"
    assert one.behind == {loser: [1]}


def test_reconcile_node_with_no_dir_at_all():
    r1, r2 = release(1, outcome=O.SUPERSEDED), release(2)
    h = reconcile([NodeCopy("spark-1", {1: r1, 2: r2}), NodeCopy("spark-2", missing=True)])
    assert [r.id for r in h.releases] == [2, 1]
    assert h.behind == {"spark-2": [1, 2]}
    assert "no release records at all" in h.disagreements["spark-2"][0]


def test_reconcile_no_dir_anywhere_is_an_empty_history_without_complaint():
    h = reconcile([NodeCopy("spark-1", missing=True), NodeCopy("spark-2", missing=True)])
    assert h.releases == [] and h.disagreements == {} and h.behind == {}
    assert h.next_id == 1


def test_reconcile_unreadable_node_is_named_not_behind():
    r1 = release(1)
    h = reconcile([NodeCopy("spark-1", {1: r1}), NodeCopy("spark-2", error="cannot read /x: permission denied")])
    assert h.releases == [r1]
    assert h.disagreements == {"spark-2": ["cannot read /x: permission denied"]}
    assert "spark-2" not in h.behind  # not known to lack anything: it could not be read
    assert h.next_id == 2


def test_reconcile_names_corrupt_records():
    r1 = release(1)
    h = reconcile([NodeCopy("spark-1", {1: r1}, corrupt=["{bad...: Expecting value"]), NodeCopy("spark-2", {1: r1})])
    assert h.disagreements == {"spark-1": ["unreadable record: {bad...: Expecting value"]}
    assert h.behind == {}


def test_next_id_follows_the_highest_id_on_any_node():
    h = reconcile([NodeCopy("spark-1", {1: release(1)}), NodeCopy("spark-2", {1: release(1), 7: release(7)})])
    assert h.next_id == 8


# ---- lock --------------------------------------------------------------------------------------
def details(**changes) -> LockDetails:
    now = time.time()
    data = dict(owner="ops@controller", host="elsewhere.example", pid=4242, pid_start="12345",
                command=["spark-deploy", "up", "r.yaml"], started_at=now - 10, expires_at=now + 600, token="ab12",
                run_id="run-9", release=9)
    data.update(changes)
    return LockDetails(**data)


@pytest.mark.parametrize("text", ["", "not json", "{truncated", "[1, 2]", "42", "null", '"a string"'])
def test_lock_parse_of_garbage_is_none(text):
    assert LockDetails.parse(text) is None


def test_a_damaged_lock_object_is_stale_not_a_crash():
    """A JSON object that lacks the lock's fields (hand-edited, another tool's) can be taken over."""
    assert stale_reason(LockDetails.parse('{"owner": "someone"}')) is not None


def test_lock_round_trip():
    d = details()
    assert LockDetails.parse(d.to_text()) == d
    assert LockDetails.parse(details(run_id=None, release=None).to_text()).run_id is None


def test_stale_unreadable_lock():
    assert "unreadable" in stale_reason(None)


def test_stale_expired():
    now = time.time()
    why = stale_reason(details(expires_at=now - 5), now=now)
    assert why is not None and "expired" in why


def test_stale_same_host_dead_pid():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()
    why = stale_reason(details(host=socket.gethostname(), pid=child.pid, pid_start="1"))
    assert why is not None and str(child.pid) in why and "gone" in why


def test_not_stale_same_host_our_live_pid():
    own = lock._start_time(os.getpid())
    assert own  # /proc is there: otherwise the rule cannot be exercised
    assert stale_reason(details(host=socket.gethostname(), pid=os.getpid(), pid_start=own)) is None


def test_stale_same_host_reused_pid():
    own = lock._start_time(os.getpid())
    other = str(int(own) + 1)
    why = stale_reason(details(host=socket.gethostname(), pid=os.getpid(), pid_start=other))
    assert why is not None and "gone" in why


def test_not_stale_other_host_not_expired():
    child = subprocess.Popen([sys.executable, "-c", "pass"])
    child.wait()  # a pid that is gone here says nothing about a process on another host
    assert stale_reason(details(host="elsewhere.example", pid=child.pid)) is None


# ---- serving -----------------------------------------------------------------------------------
def test_serving_plans_needs_every_rank_running():
    assert serving_plans({"spark-1": [box("A", 0)], "spark-2": [box("A", 1)]}) == {"A"}
    assert serving_plans({"spark-1": [box("A", 0)], "spark-2": []}) == set()
    assert serving_plans({"spark-1": [box("A", 0)], "spark-2": [box("A", 1, status="exited")]}) == set()
    assert serving_plans({"spark-1": [box("A", 0, world=1)]}) == {"A"}


def test_serving_plans_foreign_containers_do_not_count():
    unmanaged = {k: v for k, v in box("A", 1).labels.items() if k != "spark-deploy.managed"}
    assert serving_plans({"spark-1": [box("A", 0)], "spark-2": [foreign()]}) == set()
    assert serving_plans({"spark-1": [box("A", 0)], "spark-2": [foreign(labels=unmanaged)]}) == set()
    assert serving_plans({"spark-1": [box("A", 0), foreign("other")], "spark-2": [box("A", 1)]}) == {"A"}


def test_serving_plans_several_plans_and_cluster_filter():
    containers = {"spark-1": [box("A", 0), box("B", 0, status="exited", run="old"), box("C", 0, cluster="other")],
                  "spark-2": [box("A", 1), box("B", 1), box("C", 1, cluster="other")]}
    assert serving_plans(containers) == {"A", "C"}
    assert serving_plans(containers, CLUSTER) == {"A"}
    assert serving_plans(containers, "other") == {"C"}


def running(plan: str) -> dict[str, list[Container]]:
    return {"spark-1": [box(plan, 0)], "spark-2": [box(plan, 1)]}


def test_serving_release_by_running_plan():
    history = [release(3, plan="C", outcome=O.FAILED, restored=2), release(2, plan="B"),
               release(1, plan="A", outcome=O.SUPERSEDED, replaced_by=2)]
    assert serving_release(history, running("B")).id == 2
    assert serving_release(history, running("Z")) is None
    assert serving_release(history, {"spark-1": [box("B", 0)], "spark-2": []}) is None


def test_serving_release_the_record_that_says_serving_wins_over_a_newer_one_of_the_same_plan():
    # 1 served plan A, 2 plan B, 3 a rollback to plan A (serving), 4 a forced redeploy of A that failed
    history = [release(4, plan="A", outcome=O.FAILED, restored=3), release(3, plan="A", rollback_of=1),
               release(2, plan="B", outcome=O.ROLLED_BACK, replaced_by=3),
               release(1, plan="A", outcome=O.SUPERSEDED, replaced_by=2)]
    assert serving_release(history, running("A")).id == 3


def test_serving_release_newest_of_the_plan_when_no_record_says_serving():
    history = [release(2, plan="A", outcome=O.DEPLOYING), release(1, plan="A", outcome=O.SUPERSEDED)]
    assert serving_release(history, running("A")).id == 2


def test_serving_release_cluster_filter():
    history = [release(1, plan="A")]
    other = {"spark-1": [box("A", 0, cluster="other")], "spark-2": [box("A", 1, cluster="other")]}
    assert serving_release(history, other, CLUSTER) is None


HISTORY = [release(5, plan="E"),  # serving now
           release(4, plan="D", outcome=O.FAILED, failed_phase="ready", restored=3),
           release(3, plan="E", outcome=O.SUPERSEDED, replaced_by=5),  # same plan as now
           release(2, plan="B", outcome=O.SUPERSEDED, replaced_by=3),
           release(1, plan="A", outcome=O.ABANDONED)]


def test_rollback_default_target_is_the_newest_earlier_release_that_served_with_another_plan():
    assert rollback_target(HISTORY, HISTORY[0], None).id == 2


def test_rollback_default_without_anything_serving_is_the_newest_that_served():
    assert rollback_target(HISTORY, None, None).id == 5


def test_rollback_default_with_nothing_to_go_back_to():
    only = [release(2, plan="A"), release(1, plan="A", outcome=O.SUPERSEDED)]
    with pytest.raises(ValueError, match="before release 2 ever served with another plan"):
        rollback_target(only, only[0], None)
    with pytest.raises(ValueError, match="nothing to roll back to"):
        rollback_target([], None, None)


def test_rollback_explicit_release():
    assert rollback_target(HISTORY, HISTORY[0], 2).id == 2


def test_rollback_explicit_missing():
    with pytest.raises(ValueError, match=r"there is no release 9 \(known: 5, 4, 3, 2, 1\)"):
        rollback_target(HISTORY, HISTORY[0], 9)
    with pytest.raises(ValueError, match=r"known: none"):
        rollback_target([], None, 1)


def test_rollback_explicit_same_plan_as_current():
    with pytest.raises(ValueError, match="release 3 runs plan E, which is what serves now \\(release 5\\)"):
        rollback_target(HISTORY, HISTORY[0], 3)


@pytest.mark.parametrize("rid, shown", [(4, "failed in ready"), (1, "abandoned")])
def test_rollback_explicit_never_served(rid, shown):
    with pytest.raises(ValueError, match=f"release {rid} never served \\({shown}"):
        rollback_target(HISTORY, HISTORY[0], rid)


# ---- prune -------------------------------------------------------------------------------------
def test_kept_releases_failed_ones_do_not_count():
    history = [release(5, outcome=O.FAILED, restored=4), release(4, plan="D"),
               release(3, plan="C", outcome=O.SUPERSEDED), release(2, plan="B", outcome=O.FAILED),
               release(1, plan="A", outcome=O.SUPERSEDED)]
    assert [r.id for r in kept_releases(history, history[1], 2)] == [4, 3]
    assert [r.id for r in kept_releases(history, history[1], 3)] == [4, 3, 1]


def test_kept_releases_always_keep_the_serving_one():
    history = [release(3, plan="C", outcome=O.ROLLED_BACK, replaced_by=4), release(2, plan="B", outcome=O.SUPERSEDED),
               release(1, plan="A", outcome=O.SUPERSEDED)]
    serving = history[2]  # e.g. its plan runs and no record says so
    assert [r.id for r in kept_releases(history, serving, 1)] == [1, 3]
    assert [r.id for r in kept_releases(history, serving, 0)] == [1]
    deploying = release(4, plan="D", outcome=O.DEPLOYING)  # a killed `up` whose containers serve
    assert [r.id for r in kept_releases([deploying, *history], deploying, 1)] == [4, 3]
    assert kept_releases(history, None, 0) == []


def test_to_remove_only_our_stopped_containers_of_releases_not_kept():
    kept = [release(3, run="run-3"), release(2, run="run-2", outcome=O.SUPERSEDED)]
    serving = box("C", 0, run="run-3")
    kept_stopped = box("B", 0, run="run-2", status="exited", name="sd-sim-tiny-r0-run-2")
    old_stopped = box("A", 0, run="run-1", status="exited", name="sd-sim-tiny-r0-run-1")
    old_created = box("A", 0, run="run-0", status="created", name="sd-sim-tiny-r0-run-0")
    old_running = box("A", 1, run="run-1", name="sd-sim-tiny-r1-run-1")  # running: never
    stranger = foreign("sd-sim-tiny-r0-old", status="exited")
    removed = to_remove([serving, kept_stopped, old_stopped, old_created, old_running, stranger], kept)
    assert [c.name for c in removed] == ["sd-sim-tiny-r0-run-1", "sd-sim-tiny-r0-run-0"]


def test_to_remove_leaves_another_clusters_containers_on_the_same_machines():
    mine = box("A", 0, run="run-1", status="exited", name="sd-sim-tiny-r0-run-1")
    theirs = box("Z", 0, run="run-9", status="exited", name="sd-other-r0-run-9", cluster="other-pair")
    assert to_remove([mine, theirs], [], CLUSTER) == [mine]
    assert to_remove([mine, theirs], []) == [mine, theirs]  # no cluster given: every cluster's


def test_to_remove_uses_the_container_run_of_a_rollback_that_restarted_kept_containers():
    rollback = release(4, plan="A", run="run-4", container_run="run-1")
    kept_box = box("A", 0, run="run-1", status="exited")
    assert to_remove([kept_box], [rollback]) == []


# ---- audit -------------------------------------------------------------------------------------
def line(lid: str, at: float, **extra) -> str:
    return json.dumps({"id": lid, "at": at, "by": "ops@c", "action": "up", "outcome": "ok", **extra})


def test_audit_merge_dedupes_by_id_and_sorts_by_time():
    a = "\n".join([line("x1", 1.0), line("x3", 3.0)]) + "\n"
    b = "\n".join([line("x1", 1.0), "garbage {", "", json.dumps({"no": "id"}), "[1]", line("x2", 2.0)]) + "\n"
    log = merge({"spark-1": a, "spark-2": b})
    assert [l["id"] for l in log.lines] == ["x1", "x2", "x3"]
    assert log.missing_on == {"spark-1": 1, "spark-2": 1}
    assert log.unreadable == {}


def test_audit_merge_node_with_everything_is_not_named():
    a = "\n".join([line("x1", 1.0), line("x2", 2.0)])
    log = merge({"spark-1": a, "spark-2": line("x2", 2.0)})
    assert log.missing_on == {"spark-2": 1}
    assert merge({"spark-1": a, "spark-2": ""}).missing_on == {"spark-2": 2}


def test_audit_merge_unreadable_node():
    log = merge({"spark-1": line("x1", 1.0), "spark-2": None})
    assert [l["id"] for l in log.lines] == ["x1"]
    assert list(log.unreadable) == ["spark-2"] and log.unreadable["spark-2"]
    assert log.missing_on == {}


def test_audit_merge_same_time_ordered_by_id():
    log = merge({"n": "\n".join([line("b", 5.0), line("a", 5.0), line("c", 4.0)])})
    assert [l["id"] for l in log.lines] == ["c", "a", "b"]


# ---- model cache -------------------------------------------------------------------------------
COMMIT = "0123456789abcdef0123456789abcdef01234567"


@pytest.mark.parametrize("stdout, commit", [
    (f"SNAPSHOT {COMMIT}\n", COMMIT),
    (f"NOSNAPSHOT {COMMIT}\n", ""),
    ("NOREPO\n", ""),
    ("", ""),
    ("SNAPSHOT\n", ""),
])
def test_parse_revision(stdout, commit):
    assert parse_revision(stdout) == commit


def test_unlabelled_drops_label_pairs_only():
    argv = ["docker", "run", "--label", "a=b", "--name", "x", "--label", "spark-deploy.run=r1", "--env", "K=v", "img"]
    assert _unlabelled(argv) == ["docker", "run", "--env", "K=v", "img"]  # the name carries the plan hash
    assert _unlabelled([]) == []


def recorded(plan, rid: int = 1) -> Release:
    return release(rid, plan=plan.plan_hash, ranks=[
        RankRecord(rank=l.rank, node=l.node.name, container=l.container, argv=list(l.argv)) for l in plan.ranks])


def test_compare_lists_the_differing_argv_per_rank(tmp_path):
    before = build_plan(deployment(tmp_path), "run-a")
    after = build_plan(deployment(tmp_path, recipe=lambda r: r["vllm"].update(max_model_len=2048)), "run-b")
    assert before.plan_hash != after.plan_hash
    lines = compare(recorded(before), after)
    assert before.plan_hash in lines[0] and after.plan_hash in lines[0] and "release 1" in lines[0]
    assert "  rank 0: spark-1 -> spark-1" in lines and "  rank 1: spark-2 -> spark-2" in lines
    pairs = [tuple(part.strip() for part in l.split("|")) for l in lines[1:] if "|" in l]
    assert pairs == [("4096", "2048"), ("4096", "2048")]  # one per rank; labels (run, plan hash) left out
    rank1 = lines.index("  rank 1: spark-2 -> spark-2")
    assert "|" in lines[rank1 + 1]


def test_compare_same_argv_but_labels_shows_no_argv_lines(tmp_path):
    dep = deployment(tmp_path)
    lines = compare(recorded(build_plan(dep, "run-a")), build_plan(dep, "run-b"))
    assert not [l for l in lines if "|" in l]


def test_compare_rank_missing_today(tmp_path):
    before = build_plan(deployment(tmp_path), "run-a")
    record = recorded(before)
    record = record.model_copy(update={"ranks": [*record.ranks, RankRecord(
        rank=2, node="spark-3", container="sd-sim-tiny-r2", argv=["docker", "run", "--label", "a=b", "img"])]})
    lines = compare(record, before)
    at = lines.index("  rank 2: spark-3 -> (no such rank today)")
    assert [l.split("|")[0].strip() for l in lines[at + 1:]] == ["docker", "run", "img"]
