"""`watch`'s capacity rule: live decode below the release's capacity figure (bench --replicates) for K samples in
a row is one warning naming the profile, the figure and the live value; the pure rule, the figure read from the
serving release's record on an in-memory cluster, and the loop carrying the run from sample to sample (its
samples built by hand)."""
from __future__ import annotations

from functools import partial

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.operation import AuditAction, Operation, Outcome
from orchestrator.releases import store
from orchestrator.runner.events import Events
from orchestrator.transport.group import Cluster
from orchestrator.watching import loop
from orchestrator.watching.capacity import Streak, below_capacity, figure_of, live_decode
from orchestrator.watching.model import CapacityFigure, Engine, Sample, judge
from orchestrator.watching.sample import take
from orchestrator.watching.textfile import render

from memnode.endpoint import endpoint_at
from memnode.harness import MemCluster
from memnode.node import connector

FIGURE = CapacityFigure(7, "zh", 35.0)
BENCH = {"headline": {}, "replicates": {"n": 4, "profiles": {
    "code": {"capacity": 52.5, "left_out": ["replicate 1 (first run after start): ... — not used for capacity"]},
    "zh": {"capacity": 35.0, "left_out": []},
    "chat": {"capacity": None, "why_none": "1 replicate(s) with kept shots: an interval needs 2"}}}}


def run(lives: list[float | None], k: int = 3, figure: CapacityFigure | None = FIGURE) -> list[tuple[int, str | None]]:
    streak, out = Streak(), []
    for live in lives:
        streak, warning = below_capacity(streak, figure, live, k)
        out.append((streak.samples, warning))
    return out


def test_k_samples_in_a_row_below_the_figure_make_one_warning_naming_profile_figure_and_live_value():
    got = run([30.0, 31.0, 28.4, 29.0, 27.0])
    assert [n for n, _ in got] == [1, 2, 3, 4, 5]
    warnings = [w for _, w in got if w]
    assert warnings == ["live decode 28.4 tok/s has been below release 7's capacity figure 35.0 tok/s (profile zh, "
                        "from bench --replicates) for 3 samples in a row"]


def test_a_sample_at_the_figure_or_idle_ends_the_run_and_a_new_run_warns_again():
    got = run([30.0, 30.0, 35.0, 30.0, None, 30.0, 30.0, 30.0])
    assert [n for n, _ in got] == [1, 2, 0, 1, 0, 1, 2, 3]
    assert [i for i, (_, w) in enumerate(got) if w] == [7]


def test_no_figure_no_warning_and_k_one_warns_at_once():
    assert all(w is None for _, w in run([1.0] * 5, figure=None))
    assert run([34.9], k=1)[0][1] is not None


def test_another_release_serving_starts_a_new_run():
    streak, _ = below_capacity(Streak(), FIGURE, 30.0, 3)
    streak, _ = below_capacity(streak, FIGURE, 30.0, 3)
    other = CapacityFigure(8, "zh", 35.0)
    streak, warning = below_capacity(streak, other, 30.0, 3)
    assert streak.samples == 1 and warning is None


def test_the_figure_is_the_lowest_recorded_and_absent_without_replicates():
    assert figure_of(7, BENCH) == FIGURE
    assert figure_of(7, {"headline": {"code": {"decode_tps": 50.0}}}) is None
    assert figure_of(7, None) is None
    assert figure_of(7, {"replicates": {"profiles": {"zh": {"capacity": None}}}}) is None


def test_live_decode_is_read_only_while_requests_run():
    assert live_decode(Engine(running=2, gen_tps=61.0)) == 61.0
    assert live_decode(Engine(running=0, gen_tps=1.0)) is None  # idle: only watch's own 1-token probe
    assert live_decode(Engine(running=1, gen_tps=None)) is None


def sample(gen_tps: float, running: float = 1) -> Sample:
    return judge(Sample(0.0, "c", 7, "r", "p1", {}, [], [], Engine(probed=True, healthy=True, generating=True,
                                                                   running=running, gen_tps=gen_tps), 4.0,
                        capacity=FIGURE))


def test_the_loop_carries_the_run_across_samples_and_warns_once(monkeypatch):
    samples = iter([sample(30.0), sample(31.0), sample(29.0), sample(28.0)])
    monkeypatch.setattr(loop, "take", lambda *a, **kw: next(samples))
    monkeypatch.setattr(loop.time, "sleep", lambda s: None)
    shown: list[Sample] = []
    last = loop.watch("inv.yaml", None, interval=5, once=False, textfile_path=None, show=shown.append,
                      capacity_samples=2, stop=lambda: len(shown) == 4)
    assert [s.below_capacity for s in shown] == [1, 2, 3, 4]
    assert [bool(s.warnings) for s in shown] == [False, True, False, False]
    assert "29.0" not in shown[1].warnings[0] and "31.0 tok/s" in shown[1].warnings[0]
    assert last.ok  # a warning, never a problem: watch does not exit for it
    families = {f.name: f for f in text_string_to_metric_families(render(shown[1]))}
    assert families["spark_deploy_capacity_tokens_per_second"].samples[0].labels["profile"] == "zh"
    assert families["spark_deploy_below_capacity_samples"].samples[0].value == 2.0


def test_a_sample_reads_the_figure_from_the_serving_releases_record(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    mem = MemCluster(tmp_path)
    mem.up()
    seams = dict(connector=connector(mem.world), endpoint_at=endpoint_at(mem.world))
    before = take(mem.dep.inventory_path, None, None, window=0.01, **seams)
    with Operation(mem.inventory, Events(), AuditAction.BENCH_RECORD, ttl=60,
                   cluster_factory=partial(Cluster, connector=seams["connector"])) as op:  # as bench/record.py writes
        release = op.state.serving
        store.write_release(op.cluster, mem.inventory, release.touch(bench=BENCH))
        op.done(Outcome.OK, "recorded", release=release.id)
    after = take(mem.dep.inventory_path, None, None, window=0.01, **seams)
    assert before.capacity is None and before.ok
    assert after.capacity == CapacityFigure(release.id, "zh", 35.0) and after.ok
    assert after.as_dict()["capacity"] == {"release": release.id, "profile": "zh", "tok_s": 35.0}
    assert not mem.world.unknown, mem.world.unknown
