"""The drift of a maintenance window (orchestrator/maintenance/diff.py): pure, on NodeFacts built here."""

from __future__ import annotations

import pytest

from orchestrator.window.baseline import (
    BOOT_SERVING,
    BootEntry,
    GpuSeen,
    ImageSeen,
    ModelSeen,
    NodeFacts,
)
from orchestrator.maintenance.diff import BLOCKING, Consequence, Fact, compare

IMAGE = "sha256:" + "ab" * 32


def node(name: str, **changes) -> NodeFacts:
    facts = NodeFacts(
        node=name, gpu=GpuSeen(name="NVIDIA GB10", driver="580.159.03", cuda="13.0", clock=3003, max_clock=3003),
        kernel="6.11.0-1016-nvidia", os_release="Ubuntu 24.04.3 LTS", docker_version="28.3.3", docker_driver="overlay2",
        mem_total=128 << 30, mem_available=120 << 30,
        image=ImageSeen(id=IMAGE, present=True, diff_ids=["sha256:l1", "sha256:l2"]),
        model=ModelSeen(commit="c0ffee" * 6 + "abcd", files={"config.json": "9f1e 532", "model.safetensors": "77aa 1024"}),
        systemd="", units_enabled=["docker.service", "ssh.service"], restart_policies=[],
        on_boot=[BootEntry(kind="unit", name="spark-deploy-pair-tiny-r1.service", starts="container sd-tiny-r1",
                           plan_hash="p1", match=BOOT_SERVING)])
    return facts.model_copy(update=changes, deep=True)


def both(**spark2) -> tuple[dict, dict]:
    before = {"spark-1": node("spark-1"), "spark-2": node("spark-2")}
    after = {"spark-1": node("spark-1"), "spark-2": node("spark-2", **spark2)}
    return before, after


def test_nothing_changed_is_safe_and_every_fact_is_shown_side_by_side():
    before, after = both(mem_available=90 << 30)  # MemAvailable moves all the time: not a change
    drift = compare(before, after)
    assert drift.changes == [] and drift.blocking == []
    assert drift.consequences == [Consequence.SAFE]
    shown = {(r.node, r.fact) for r in drift.rows}
    assert {(n, f) for n in before for f in Fact if f is not Fact.REACHABLE} == shown
    assert not any(r.changed for r in drift.rows)


def test_a_driver_update_on_spark_2_means_the_flags_must_be_checked_again():
    gpu = node("spark-2").gpu.model_copy(update={"driver": "580.165.02"})
    drift = compare(*both(gpu=gpu))
    assert [c.text() for c in drift.changes] == ["driver 580.159.03 → 580.165.02 on spark-2"]
    change = drift.changes[0]
    assert change.consequence is Consequence.RECHECK_FLAGS and change in drift.blocking
    row = next(r for r in drift.rows if r.fact is Fact.DRIVER and r.node == "spark-2")
    assert (row.before, row.after, row.changed) == ("580.159.03", "580.165.02", True)
    assert not next(r for r in drift.rows if r.fact is Fact.DRIVER and r.node == "spark-1").changed
    assert drift.consequences == [Consequence.RECHECK_FLAGS]
    assert drift.as_dict()["ok"] is False


def test_a_clock_that_moves_is_no_change_but_a_locked_clock_is():
    moved = node("spark-2").gpu.model_copy(update={"clock": 2990})
    assert compare(*both(gpu=moved)).changes == []
    locked = node("spark-2").gpu.model_copy(update={"clock": 2200})
    drift = compare(*both(gpu=locked))
    assert [(c.fact, c.consequence) for c in drift.changes] == [(Fact.SM_CLOCK, Consequence.RESET_CLOCK)]
    assert "(locked)" in drift.changes[0].after
    before, after = both()
    before["spark-2"] = node("spark-2", gpu=locked)
    unlocked = compare(before, after)
    assert [c.consequence for c in unlocked.changes] == [Consequence.NOTED] and not unlocked.blocking
    assert unlocked.consequences[0] is Consequence.SAFE
    idle = node("spark-2").gpu.model_copy(update={"clock": 208, "idle": True})  # an idle GPU clocks down
    assert compare(*both(gpu=idle)).changes == []
    app_locked = node("spark-2").gpu.model_copy(update={"clocks_locked": True})  # nvidia-smi -lgc at full speed
    drift = compare(*both(gpu=app_locked))
    assert [c.consequence for c in drift.changes] == [Consequence.RESET_CLOCK]
    assert drift.changes[0].after == "3003 of 3003 MHz (locked: application clocks set)"
    unread = node("spark-2").gpu.model_copy(update={"clock": None, "max_clock": None})
    (change,) = compare(*both(gpu=unread)).changes  # nvidia-smi gives no clock: shown, no consequence
    assert (change.fact, change.after, change.consequence) == (Fact.SM_CLOCK, "[N/A]", Consequence.NOTED)


def test_the_image_missing_on_a_node_means_a_resync():
    gone = ImageSeen(id=IMAGE, present=False)
    drift = compare(*both(image=gone))
    assert [(c.node, c.fact, c.consequence) for c in drift.changes] == [("spark-2", Fact.IMAGE, Consequence.RESYNC_IMAGE)]
    assert drift.changes[0].after.startswith("missing")
    before, after = both()
    before["spark-2"] = node("spark-2", image=gone)
    assert [c.consequence for c in compare(before, after).changes] == [Consequence.NOTED]  # it came back: fine


def test_a_model_file_that_changed_is_named_and_means_a_download():
    model = node("spark-2").model.model_copy(update={"files": {"config.json": "9f1e 532", "model.safetensors": "0bad 1024"}})
    drift = compare(*both(model=model))
    (change,) = drift.changes
    assert change.consequence is Consequence.REDOWNLOAD_MODEL
    assert change.before == "model.safetensors 77aa 1024" and change.after == "model.safetensors 0bad 1024"
    moved = node("spark-2").model.model_copy(update={"commit": "d" * 40})
    assert compare(*both(model=moved)).changes[0].after.startswith("dddddddddddd")


@pytest.mark.parametrize("change, fact", [
    ({"kernel": "6.11.0-1017-nvidia"}, Fact.KERNEL),
    ({"os_release": "Ubuntu 24.04.4 LTS"}, Fact.OS),
    ({"docker_version": "28.4.0"}, Fact.DOCKER),
    ({"mem_total": 64 << 30}, Fact.MEMORY),
])
def test_host_changes_mean_preflight_again(change, fact):
    drift = compare(*both(**change))
    assert [(c.fact, c.consequence) for c in drift.changes] == [(fact, Consequence.RERUN_PREFLIGHT)]


def test_a_unit_enabled_is_shown_and_another_stack_coming_back_blocks():
    drift = compare(*both(units_enabled=["docker.service", "old-vllm.service", "ssh.service"]))
    assert [(c.fact, c.consequence) for c in drift.changes] == [(Fact.UNITS, Consequence.BOOT_CHANGED)]
    assert "old-vllm.service" in drift.changes[0].after and not drift.blocking
    other = BootEntry(kind="unit", name="old-vllm.service", starts="docker run vllm/vllm-openai:v0.9.1",
                      match="comes back but is another stack")
    entries = node("spark-2").on_boot + [other]
    drift = compare(*both(on_boot=entries))
    assert [(c.fact, c.consequence) for c in drift.changes] == [(Fact.ON_BOOT, Consequence.BOOT_OTHER)]
    assert drift.blocking and "old-vllm.service comes back but is another stack" in drift.changes[0].after
    assert compare(*both(on_boot=[])).changes[0].consequence is Consequence.BOOT_CHANGED  # no longer comes back


def test_an_unreachable_node_or_an_unreadable_fact_cannot_be_judged():
    before, after = both()
    after["spark-2"] = NodeFacts(node="spark-2", unreachable="cannot reach 10.0.0.2:22: timed out")
    drift = compare(before, after)
    assert [(c.node, c.fact, c.consequence) for c in drift.changes] == [
        ("spark-2", Fact.REACHABLE, Consequence.CANNOT_JUDGE)]
    assert drift.blocking
    drift = compare(*both(gpu=None, errors={"gpu": "NVIDIA-SMI has failed"}))
    gpu_changes = {c.fact: c for c in drift.changes}
    assert set(gpu_changes) == {Fact.GPU, Fact.DRIVER, Fact.CUDA, Fact.SM_CLOCK}
    assert all(c.consequence is Consequence.CANNOT_JUDGE and "NVIDIA-SMI has failed" in c.after
               for c in gpu_changes.values())


def test_a_fact_the_baseline_lacks_is_noted_not_blocking():
    before, after = both()
    before["spark-2"] = node("spark-2", on_boot=None, units_enabled=None, restart_policies=None)
    drift = compare(before, after)
    assert {c.fact for c in drift.changes} == {Fact.ON_BOOT, Fact.UNITS, Fact.RESTART}
    assert all(c.consequence is Consequence.NOTED for c in drift.changes) and not drift.blocking
    assert all(c.before == "not gathered" for c in drift.changes)


def test_consequences_most_pressing_first_and_each_has_advice():
    gpu = node("spark-2").gpu.model_copy(update={"driver": "580.165.02", "clock": 2000})
    drift = compare(*both(gpu=gpu, image=ImageSeen(id=IMAGE, present=False)))
    assert drift.consequences == [Consequence.RESYNC_IMAGE, Consequence.RECHECK_FLAGS, Consequence.RESET_CLOCK]
    data = drift.as_dict()
    assert [c["consequence"] for c in data["consequences"]] == [str(c) for c in drift.consequences]
    assert all(c["advice"] and c["blocks"] for c in data["consequences"])
    assert Consequence.SAFE not in BLOCKING and Consequence.NOTED not in BLOCKING
