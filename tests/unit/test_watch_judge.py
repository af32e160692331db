"""`watch`'s judgement and its Prometheus text, on samples built by hand (the sampling itself runs on the
simulated cluster: tests/integration/test_acceptance.py)."""
from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

from orchestrator.watching.model import Engine, NodeFacts, Rank, RankState, Sample, judge
from orchestrator.watching.sample import node_facts
from orchestrator.watching.textfile import render

SAMPLES = __import__("pathlib").Path(__file__).parent / "samples"


def sample(**changes) -> Sample:
    base = dict(at=0.0, cluster="c", release=3, recipe="r", plan_hash="p1", plans={"a": ["p1"], "b": ["p1"]},
                ranks=[Rank(0, "a", "id0", RankState.RUNNING), Rank(1, "b", "id1", RankState.RUNNING)],
                nodes=[NodeFacts("a", 12.0, 0.0, 2400.0), NodeFacts("b", 11.0, 0.0, 2400.0)],
                engine=Engine(probed=True, healthy=True, generating=True, probe="ok", running=0, waiting=0,
                              kv_usage=0.0, gen_tps=3.0, spec_acceptance_total=0.5),
                reserve_gib=4.0)
    base.update(changes)
    return judge(Sample(**base))


def test_a_healthy_sample_is_ok_and_its_text_parses():
    s = sample()
    assert s.ok and not s.warnings
    families = {f.name: f for f in text_string_to_metric_families(render(s))}
    assert families["spark_deploy_ok"].samples[0].value == 1.0
    assert families["spark_deploy_plan_matches"].samples[0].value == 1.0
    assert families["spark_deploy_mem_available_bytes"].samples[0].value == 12.0 * 2**30


def test_each_problem_is_named():
    gone = sample(ranks=[Rank(0, "a", "id0", RankState.RUNNING), Rank(1, "b", "id1", RankState.STOPPED, "exited, exit 137")],
                  engine=Engine(probe="not probed: rank 1 is gone"))
    assert gone.problems == ["rank 1 (b) is gone: container id1 stopped (exited, exit 137)"]
    plan = sample(plans={"a": ["p1"], "b": ["p9"]})
    assert plan.problems == ["b runs plan p9, not release 3's p1"]
    stuck = sample(engine=Engine(probed=True, probe="the probe completion failed: timed out"))
    assert stuck.problems == ["the endpoint is not generating: the probe completion failed: timed out"]
    low = sample(nodes=[NodeFacts("a", 12.0), NodeFacts("b", 0.5)])
    assert low.problems == low.warnings == ["b: MemAvailable 0.5 GiB is under the reserve of 4 GiB "
                                            "(preflight.memory_reserve_gib; field note 8)"]
    families = {f.name: f for f in text_string_to_metric_families(render(plan))}
    assert families["spark_deploy_plan_matches"].samples[0].value == 0.0


def test_a_rank_that_cannot_be_observed_is_not_called_gone():
    unseen = Rank(1, "b", "", RankState.UNREACHABLE, "ssh: connect timed out", name="sd-r-rank1-0123456789abcdef")
    serving = sample(ranks=[Rank(0, "a", "id0", RankState.RUNNING), unseen])
    assert serving.problems == ["cannot observe rank 1 on b (ssh: connect timed out): the container named "
                                "sd-r-rank1-0123456789abcdef may still run; the endpoint still generates"]
    stuck = sample(ranks=[Rank(0, "a", "id0", RankState.RUNNING), unseen],
                   engine=Engine(probed=True, probe="the probe completion failed: timed out"))
    assert stuck.problems == ["cannot observe rank 1 on b (ssh: connect timed out): the container named "
                              "sd-r-rank1-0123456789abcdef may still run",
                              "the endpoint is not generating: the probe completion failed: timed out"]
    absent = sample(ranks=[Rank(0, "a", "id0", RankState.RUNNING),
                           Rank(1, "b", "", RankState.ABSENT, name="sd-r-rank1-0123456789abcdef")])
    assert absent.problems == ["rank 1 (b) is gone: the container named sd-r-rank1-0123456789abcdef absent"]


def test_node_facts_read_meminfo_and_the_sm_clock():
    text = (SAMPLES / "meminfo-sim-spark-serving-0.7.txt").read_text() + "@@gpu\n2405\n"
    facts = node_facts("a", text)
    assert facts.sm_clock_mhz == 2405.0 and 0 < facts.mem_available_gib < 20 and facts.sm_clock_missing is None
    broken = node_facts("b", "garbage@@gpu\nNVIDIA-SMI has failed")
    assert broken.error.startswith("meminfo unreadable") and broken.sm_clock_mhz is None
    assert broken.sm_clock_missing == "nvidia-smi: NVIDIA-SMI has failed"
    assert node_facts("c", text.split("@@gpu")[0] + "@@gpu\n").sm_clock_missing == "nvidia-smi printed nothing"
