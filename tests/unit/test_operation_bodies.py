"""Issue 35, acceptance 1: `rollback`, `bench --compare` and `maintenance end` are bodies of ONE Operation,
on the in-memory connector (tests/memnode): the cluster opened once, the inventory parsed once, the lock
taken once and before the state a choice is made from is read, one audit line per command."""

from __future__ import annotations

import contextlib
import json

import pytest

from orchestrator.bench import compare as compare_mod
from orchestrator.config import load as config_load
from orchestrator.config import source as config_source
from orchestrator.deploy import rollback as rollback_mod
from orchestrator.maintenance import end as end_mod
from orchestrator.maintenance import window
from orchestrator.releases import audit, lock
from orchestrator.releases.lock import lock_path

from memnode import connector
from memnode.harness import MemCluster, quick


def variant(seqs: int):
    def edit(recipe: dict) -> None:
        recipe["vllm"]["extra"]["max-num-seqs"] = seqs
    return edit


def audit_lines(mem: MemCluster, node: str = "spark-1") -> list[dict]:
    text = mem.node(node).files.get(audit.audit_path(mem.inventory, node), "")
    return [json.loads(line) for line in text.splitlines()]


def sent(made, constant: str) -> int:
    return sum(1 for conn in made.made for c in conn.commands if c is constant)


def locked(mem: MemCluster) -> bool:
    return lock_path(mem.inventory) in mem.node(mem.inventory.head).files


@pytest.fixture
def parses(monkeypatch):
    """Every YAML file parsed from disk (an inventory, a recipe), by path."""
    read: list[str] = []
    real = config_source.read_document

    def counting(path):
        read.append(str(path))
        return real(path)

    monkeypatch.setattr(config_load, "read_document", counting)
    return read


def test_rollback_opens_once_parses_the_inventory_once_and_chooses_under_the_lock(mem, parses, monkeypatch):
    mem.up(mem.deployment(variant(8)))
    second = mem.up(mem.deployment(variant(10)))
    lines_before = len(audit_lines(mem))
    chose: list[bool] = []
    real_target = rollback_mod.rollback_target

    def target(releases, current, wanted):
        chose.append(locked(mem))  # the lock file is on the head when the target is read
        return real_target(releases, current, wanted)

    monkeypatch.setattr(rollback_mod, "rollback_target", target)
    made = connector(mem.world)
    parses.clear()

    result = mem.rollback(connector=made)

    assert result.release == 3 and mem.serving_plan() != second.plan_hash
    assert chose == [True], "the target was chosen before the deploy lock was held"
    assert parses == [], f"the inventory (or a recipe) was parsed again from a file: {parses}"
    assert len(made.made) == len(mem.inventory.nodes), "the cluster was opened more than once"
    assert sent(made, lock._CREATE) == 1 and sent(made, lock._RELEASE) == 1
    lines = audit_lines(mem)[lines_before:]
    assert [(a["action"], a["outcome"], a.get("release")) for a in lines] == [("rollback", "serving", 3)], lines
    assert not locked(mem)


def test_rollback_refused_writes_its_one_line_and_lets_the_lock_go(mem):
    mem.up()
    with pytest.raises(rollback_mod.RollbackRefused):
        mem.rollback()  # one release only: nothing to roll back to
    line = audit_lines(mem)[-1]
    assert (line["action"], line["outcome"]) == ("rollback", "refused"), line
    assert not locked(mem)


def test_bench_compare_abab_takes_the_lock_once_and_writes_one_line_naming_each_block(mem, monkeypatch):
    before = mem.up(mem.deployment(variant(8)))
    deps = {"A": mem.deployment(variant(8)), "B": mem.deployment(variant(10))}
    monkeypatch.setattr(compare_mod, "open_client", lambda url: contextlib.nullcontext())
    monkeypatch.setattr(compare_mod, "run", lambda http, model, plan, on_shot: [])  # the measurement: not here
    lines_before = len(audit_lines(mem))
    seams = mem.seams()

    result = compare_mod.compare(deps, str(mem.dep.inventory_path), "ABAB", lambda target: None, mem.events,
                                 seams=seams)

    made = seams.connector
    assert sent(made, lock._CREATE) == 1 and sent(made, lock._RELEASE) == 1, "the lock was taken more than once"
    assert len(made.made) == len(mem.inventory.nodes), "the cluster was opened more than once"
    assert [b.label for b in result.blocks] == list("ABAB")
    assert mem.serving_plan() == before.plan_hash and result.before == before.release
    lines = audit_lines(mem)[lines_before:]
    assert [a["action"] for a in lines] == ["bench-compare"], lines
    line = lines[0]
    assert line["outcome"] == "ok" and line["release"] == before.release
    assert [(b["block"], b["release"], b["outcome"]) for b in line["blocks"]] == [
        (b.label, b.release, "measured") for b in result.blocks]
    assert all(f"{b.label} {deps[b.label].recipe.name} release {b.release}: measured" in line["detail"]
               for b in result.blocks), line["detail"]
    assert [p["action"] for p in line["parts"]].count("rollback") == 1, "the restore is a part of the line"
    assert not locked(mem)


def test_maintenance_end_writes_one_audit_line_with_its_rollback_as_a_part(mem):
    served = mem.up()
    opened = window.begin(mem.dep, mem.events, "firmware", stop=True, connector=connector(mem.world), checks=[])
    assert opened.stop is not None and mem.serving_plan() is None
    lines_before = len(audit_lines(mem))
    made = connector(mem.world)

    result = end_mod.end(str(mem.dep.inventory_path), None, mem.events, ready_timeout=5, connector=made,
                         endpoint_at=mem.seams().endpoint_at, options=quick())

    assert result.outcome is end_mod.EndOutcome.BROUGHT_BACK, result.detail
    assert mem.serving_plan() == served.plan_hash
    assert len(made.made) == len(mem.inventory.nodes) and sent(made, lock._CREATE) == 1
    lines = audit_lines(mem)[lines_before:]
    assert [a["action"] for a in lines] == ["maintenance-end"], lines
    assert lines[0]["window_outcome"] == "brought back"
    assert [(p["action"], p["outcome"], p.get("release")) for p in lines[0]["parts"]] == [
        ("rollback", "serving", result.up.release)]
    assert not locked(mem)


# ---- a node not read: which release serves is "unknown", never "none" ------------------------------------
def test_prune_with_a_node_unread_says_unknown_and_keeps_what_may_serve(mem):
    for seqs in (8, 10):
        serving = mem.up(mem.deployment(variant(seqs)))
    mem.node("spark-2").unreachable = "connection refused"
    result = mem.prune(keep=0)
    assert result.serving is None and not result.serving_known
    assert serving.release in result.kept, "the release whose record says serving is kept while it is unknown"


def test_down_with_a_node_unread_records_no_release_as_stopped_and_says_why(mem):
    served = mem.up()
    mem.node("spark-2").unreachable = "connection refused"
    mem.down(mem.dep.recipe.name)
    line = audit_lines(mem)[-1]
    assert line["action"] == "down" and "which release served is unknown" in line["detail"], line
    assert "release" not in line


def test_boot_status_and_status_with_a_node_unread_say_unknown_not_nothing(mem):
    from functools import partial

    from orchestrator.deploy import boot, status
    from orchestrator.operation import Operation, Reach
    from orchestrator.transport.group import Cluster

    mem.up()
    mem.node("spark-2").unreachable = "connection refused"
    # an enclosing operation lends its in-memory connections to the commands' own observations
    with Operation(mem.inventory, mem.events, "test", reach=Reach.HEAD,
                   cluster_factory=partial(Cluster, connector=connector(mem.world))) as op:
        report = boot.status(mem.inventory, None)
        seen = status.collect(mem.inventory, None, probe=False)
        op.done("ok")
    assert report.serving is None and "spark-2" in report.serving_unknown
    assert report.as_dict()["serving_known"] is False
    assert seen.deployments and all(not d.release_known for d in seen.deployments)


def test_compare_binds_its_second_recipe_to_the_inventory_parsed_for_the_first(mem, parses):
    b = config_load.load_recipe_on(mem.dep.recipe_path, mem.dep)
    assert parses == [str(mem.dep.recipe_path)], "the inventory was parsed again"
    assert b.inventory is mem.dep.inventory and b.recipe == mem.dep.recipe


def test_bench_compare_whose_first_block_fails_writes_one_failed_line_naming_the_blocks(mem):
    from memnode import Fault

    before = mem.up(mem.deployment(variant(8)))
    deps = {"A": mem.deployment(variant(8)), "B": mem.deployment(variant(10))}
    mem.node("spark-1").faults.append(Fault.DIE_AT_START)
    lines_before = len(audit_lines(mem))

    with pytest.raises(compare_mod.CompareError):
        compare_mod.compare(deps, str(mem.dep.inventory_path), "BA", lambda target: pytest.fail("no block ran"),
                            mem.events, seams=mem.seams())

    lines = audit_lines(mem)[lines_before:]
    assert [(a["action"], a["outcome"]) for a in lines] == [("bench-compare", "failed")], lines
    assert [(b["block"], b["outcome"]) for b in lines[0]["blocks"]] == [("B", "failed"), ("A", "not run")]
    assert "B: failed: B (sim-tiny" in lines[0]["detail"] and lines[0]["release"] == before.release
    assert [(p["action"], p["outcome"]) for p in lines[0]["parts"]] == [("up", "failed")]
    assert not locked(mem)


class _Group:
    """A measured group as the gate reads it (runner.Group's shape, fixed values)."""

    def __init__(self, profile: str, values: list[float]):
        self.profile, self.concurrency, self.values = profile, 1, values

    def decode_values(self) -> list[float]:
        return self.values

    def headline(self):
        from orchestrator.bench import stats
        return stats.headline(self.values)

    def as_dict(self) -> dict:
        return {"profile": self.profile, "values": self.values}


def _record(mem, release: int):
    """The release's record as the head holds it."""
    from orchestrator.releases import store
    from orchestrator.releases.record import Release

    head = mem.inventory.head
    return Release.model_validate_json(mem.node(head).files[store.record_path(mem.inventory, head, release)])


def _gate(mem, monkeypatch, b_zh: float):
    """`up --gate` of variant(10) against variant(8) serving, B's zh at `b_zh` x A's (code equal)."""
    from orchestrator.bench import gate as gate_mod
    from orchestrator.render.plan import build_plan

    before = mem.up(mem.deployment(variant(8)))
    dep_b = mem.deployment(variant(10))
    b_plan = build_plan(dep_b).plan_hash
    shots = [100.0, 101.0, 99.0]

    def measure(tgt, plan_of, on_shot):
        factor = b_zh if mem.serving_plan() == b_plan else 1.0
        return [_Group("code", shots), _Group("zh", [v * factor for v in shots])]
    monkeypatch.setattr(gate_mod, "_measure", measure)
    lines_before = len(audit_lines(mem))
    seams = mem.seams()
    result = gate_mod.gate(dep_b, str(mem.dep.inventory_path), "ABAB", lambda t: None, 0.03, mem.events, seams=seams)
    made = seams.connector
    assert sent(made, lock._CREATE) == 1 and sent(made, lock._RELEASE) == 1, "the lock was taken more than once"
    assert len(made.made) == len(mem.inventory.nodes), "the cluster was opened more than once"
    lines = audit_lines(mem)[lines_before:]
    assert [a["action"] for a in lines] == ["up-gate"], lines
    return before, b_plan, result, lines[0]


def test_up_gate_rejects_a_slower_profile_in_one_operation_and_a_serves_again(mem, monkeypatch):
    before, b_plan, result, line = _gate(mem, monkeypatch, 0.8)
    assert str(result.verdict) == "rejected" and "zh B/A 0.800" in result.reason
    assert mem.serving_plan() == before.plan_hash
    assert [b.label for b in result.blocks.blocks] == list("ABAB") and result.against == before.release
    assert line["outcome"] == "failed" and line["release"] == result.release and line["gate"]["verdict"] == "rejected"
    record = _record(mem, result.release)
    assert record.plan_hash == b_plan and record.gate["profiles"]["zh"]["verdict"] == "below"


def test_up_gate_keeps_an_equal_candidate_serving(mem, monkeypatch):
    before, b_plan, result, line = _gate(mem, monkeypatch, 1.0)
    assert str(result.verdict) == "kept" and mem.serving_plan() == b_plan
    assert line["outcome"] == "ok" and _record(mem, result.release).gate["verdict"] == "kept"


def test_up_gate_with_nothing_serving_is_refused_with_one_line(mem):
    from orchestrator.bench import gate as gate_mod

    with pytest.raises(gate_mod.GateRefused, match="nothing to gate against; run `up` without --gate"):
        gate_mod.gate(mem.deployment(variant(10)), str(mem.dep.inventory_path), "ABAB", lambda t: None, 0.03,
                      mem.events, seams=mem.seams())
    line = audit_lines(mem)[-1]
    assert (line["action"], line["outcome"]) == ("up-gate", "refused"), line
    assert not locked(mem)


def test_supervise_enable_with_nothing_serving_is_refused_with_one_line(mem):
    from orchestrator.deploy import supervise

    with pytest.raises(supervise.SuperviseRefused, match="no release serves on .*: nothing to supervise"):
        supervise.enable(mem.inventory, str(mem.dep.inventory_path), mem.events, connector=connector(mem.world))
    line = audit_lines(mem)[-1]
    assert (line["action"], line["outcome"]) == ("supervise-enable", "refused"), line
    assert not locked(mem)
    assert not [p for p in mem.node("spark-1").files if "/supervise/" in p]  # nothing installed
