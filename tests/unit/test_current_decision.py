"""Issue 7, acceptance 2: what `up` does with what already runs (deploy/current.decide), as a table.

Input is what preflight reads on every node: our containers of the recipe (by label) and any holding the
plan's names, parsed from `docker container inspect` output (fakes.container_inspect, shaped like a capture from a simulated node).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import pytest

from fakes import deployment, foreign, ours
from orchestrator.deploy.current import Action, decide
from orchestrator.render.plan import Plan, build_plan

OLD = "0123456789abcdef"


@dataclass
class Case:
    found: callable  # plan -> {node: [Container]}
    action: Action
    reason: tuple[str, ...] = ()  # fragments the reason must contain
    force: bool = False
    clash: list[str] = field(default_factory=list)  # nodes with a foreign holder
    previous: tuple[str, ...] = ()  # nodes whose running containers are the current deployment
    taken: bool = False  # a container of ours already holds one of the plan's names


def both(plan: Plan, **kw) -> dict:
    return {"spark-1": [ours(plan, 0, **kw)], "spark-2": [ours(plan, 1, **kw)]}


def stopped(plan: Plan, **kw) -> dict:
    return {"spark-1": [ours(plan, 0, status="exited", **kw)], "spark-2": [ours(plan, 1, status="exited", **kw)]}


def merged(*parts: dict) -> dict:
    out: dict = {}
    for part in parts:
        for node, cs in part.items():
            out.setdefault(node, []).extend(cs)
    return out


def name(plan: Plan, rank: int) -> str:
    return plan.ranks[rank].container


CASES = {
    "nothing anywhere": Case(lambda p: {}, Action.FRESH, ("no container",)),
    "nodes answered, none holds a name": Case(lambda p: {"spark-1": [], "spark-2": []}, Action.FRESH,
                                               ("no container",)),
    "this plan on every rank": Case(both, Action.ALREADY_SERVING, ("runs on every rank",),
                                    previous=("spark-1", "spark-2"), taken=True),
    "this plan, --redeploy": Case(both, Action.REPLACE, ("--redeploy",), force=True, previous=("spark-1", "spark-2"),
                               taken=True),
    "an older plan on every rank": Case(lambda p: both(p, plan_hash=OLD), Action.REPLACE,
                                        ("rank 0 runs plan " + OLD, "rank 1 runs plan " + OLD),
                                        previous=("spark-1", "spark-2")),
    "an older plan on the peer only": Case(
        lambda p: {"spark-1": [ours(p, 0)], "spark-2": [ours(p, 1, plan_hash=OLD)]}, Action.REPLACE,
        ("rank 1 runs plan " + OLD,), previous=("spark-1", "spark-2"), taken=True),
    "the peer's rank missing": Case(lambda p: {"spark-1": [ours(p, 0)], "spark-2": []}, Action.REPLACE,
                                    ("rank 1 (sd-sim-tiny-r1-", ") missing"), previous=("spark-1",), taken=True),
    "the head's rank missing": Case(lambda p: {"spark-2": [ours(p, 1)]}, Action.REPLACE,
                                    ("rank 0 (sd-sim-tiny-r0-", ") missing"), previous=("spark-2",), taken=True),
    "the peer exited: only the running head is stopped": Case(
        lambda p: {"spark-1": [ours(p, 0)], "spark-2": [ours(p, 1, status="exited", exit_code=137)]},
        Action.REPLACE, ("rank 1 exited",), previous=("spark-1",), taken=True),
    "both exited, --force: nothing runs, nothing to stop": Case(lambda p: both(p, status="exited"), Action.FRESH,
                                                                ("no container",), force=True, taken=True),
    "an older spark-deploy's containers (no plan hash)": Case(lambda p: both(p, plan_hash=""), Action.REPLACE,
                                                              ("runs plan unknown",),
                                                              previous=("spark-1", "spark-2")),
    "an older spark-deploy's names (sd-RECIPE-rN serving, -RUN kept): by labels, no clash": Case(
        lambda p: merged({"spark-1": [ours(p, 0, plan_hash=OLD, name="sd-sim-tiny-r0")],
                          "spark-2": [ours(p, 1, plan_hash=OLD, name="sd-sim-tiny-r1")]},
                         stopped(p, plan_hash="fedcba9876543210", name=None)),
        Action.REPLACE, ("rank 0 runs plan " + OLD,), previous=("spark-1", "spark-2")),
    "an older plan kept, stopped; nothing runs": Case(lambda p: stopped(p, plan_hash=OLD), Action.FRESH,
                                                      ("no container",)),
    "this plan kept from before while another serves: names taken": Case(
        lambda p: merged(stopped(p), both(p, plan_hash=OLD)), Action.REPLACE, ("runs plan " + OLD,),
        previous=("spark-1", "spark-2"), taken=True),
    "another recipe or cluster running on the nodes is not ours to stop": Case(
        lambda p: {"spark-1": [ours(p, 0, plan_hash=OLD, recipe="other")],
                   "spark-2": [ours(p, 1, plan_hash=OLD, cluster="other-pair")]}, Action.FRESH, ("no container",)),
    "a foreign container holds the head's name": Case(
        lambda p: {"spark-1": [foreign(name(p, 0))], "spark-2": []}, Action.FRESH, ("name clash",),
        clash=["spark-1"]),
    "a foreign container next to ours": Case(
        lambda p: {"spark-1": [ours(p, 0)], "spark-2": [foreign(name(p, 1), status="exited")]},
        Action.FRESH, ("name clash",), clash=["spark-2"], taken=True),
    "a foreign container, --force": Case(
        lambda p: {"spark-1": [foreign(name(p, 0))]}, Action.FRESH, ("name clash",), force=True,
        clash=["spark-1"]),
    "a foreign container with an old-style name is no clash": Case(
        lambda p: {"spark-1": [foreign("sd-sim-tiny-r0")]}, Action.FRESH, ("no container",)),
}


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> Plan:
    return build_plan(deployment(tmp_path_factory.mktemp("decide")), "run-now")


@pytest.mark.parametrize("name", list(CASES))
def test_decision_table(plan, name):
    case = CASES[name]
    found = case.found(plan)
    decision = decide(plan, found, case.force)
    assert decision.action is case.action, decision.reason
    for fragment in case.reason:
        assert fragment in decision.reason, f"{fragment!r} not in {decision.reason!r}"
    assert [node for node, _ in decision.clashes] == case.clash
    if case.clash:
        assert decision.previous == {}, "nothing is to be stopped when a name is held by someone else"
        assert all(c.ours is None for _, c in decision.clashes)
    else:
        assert sorted(decision.previous) == sorted(case.previous)
        for node, containers in decision.previous.items():
            assert containers == [c for c in found[node] if c.running and c.ours is not None]
    assert decision.names_taken is case.taken


def test_previous_running_says_whether_anything_serves(plan):
    assert decide(plan, both(plan, plan_hash=OLD), False).previous_running
    assert not decide(plan, both(plan, status="exited"), False).previous_running
    assert not decide(plan, {}, False).previous_running


def test_a_restarting_rank_counts_as_running(plan):
    """Docker's `restarting` is between runs of a bounded restart policy: the container is still ours and alive."""
    found = {"spark-1": [ours(plan, 0)], "spark-2": [ours(plan, 1, status="restarting")]}
    assert decide(plan, found, False).action is Action.ALREADY_SERVING


def test_a_plan_change_on_the_peer_only_is_noticed(tmp_path):
    """Issue 7 item 1: NCCL_DEBUG added to the peer in the inventory must redeploy."""
    before = build_plan(deployment(tmp_path), "run-1")
    after = build_plan(deployment(tmp_path, inventory=lambda inv: inv["nodes"][1].update(env={"NCCL_DEBUG": "WARN"})),
                       "run-2")
    running = both(before)
    assert decide(before, running, False).action is Action.ALREADY_SERVING
    decision = decide(after, running, False)
    assert decision.action is Action.REPLACE
    assert f"runs plan {before.plan_hash}" in decision.reason
