"""Issue 19, acceptance 3: a container's name carries its plan and is never changed; ours are found by labels.

Pure: the names a plan renders, the plan hash they carry, which of our containers is the deployment now
(status, logs), and the migration from the names an older spark-deploy gave (`sd-RECIPE-rN` serving,
`sd-RECIPE-rN-RUN` kept): by labels those are just names.
"""

from __future__ import annotations

import re

import pytest

from fakes import deployment, ours
from orchestrator.deploy.current import Action, decide
from orchestrator.deploy.rollback_check import pick_kept
from orchestrator.docker_cli.containers import current_of
from orchestrator.releases.record import ModelSeen, Release, RankRecord
from orchestrator.render.plan import Plan, build_plan, plan_hash
from orchestrator.render.spec import base_name, build_spec, container_name

DOCKER_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")  # what `docker run --name` accepts
OLD = "0123456789abcdef"


@pytest.fixture(scope="module")
def plan(tmp_path_factory) -> Plan:
    return build_plan(deployment(tmp_path_factory.mktemp("names")), "20261204T101010Z-a1b2c3")


def test_the_plan_is_readable_from_each_name(plan):
    for launch in plan.ranks:
        assert launch.container == f"sd-sim-tiny-r{launch.rank}-{plan.plan_hash[:8]}"
        assert DOCKER_NAME.match(launch.container)
        argv = list(launch.argv)
        assert argv[argv.index("--name") + 1] == launch.container  # what `docker run` is given
        assert launch.container.rsplit("-", 1)[1] == launch.labels.plan_hash[:8]


def test_two_plans_of_one_recipe_never_share_a_name(plan, tmp_path):
    other = build_plan(deployment(tmp_path, lambda r: r["vllm"].update(max_model_len=2048)), plan.run_id)
    assert other.plan_hash != plan.plan_hash
    assert not {l.container for l in plan.ranks} & {l.container for l in other.ranks}


def test_the_name_is_not_part_of_the_hash_so_older_releases_keep_theirs(plan, tmp_path):
    """The hash is over the argv with the plan-free base name, as before names carried the plan: a release
    recorded by an older spark-deploy still matches today's plan (already serving, rollback's kept check)."""
    dep = deployment(tmp_path)
    specs = [build_spec(dep, node, rank) for rank, node in enumerate(dep.inventory.ranked)]
    assert [s.container for s in specs] == [base_name("sim-tiny", 0), base_name("sim-tiny", 1)]
    assert plan_hash(specs, plan.image_id) == plan.plan_hash
    assert build_plan(dep, "another-run").plan_hash == plan.plan_hash  # the run is in no name by default


def test_a_same_plan_redeploy_takes_a_run_suffixed_name(plan):
    again = plan.named_for_run()
    assert again.plan_hash == plan.plan_hash and again.run_id == plan.run_id
    for before, after in zip(plan.ranks, again.ranks):
        assert after.container == f"{before.container}-{plan.run_id}" == container_name(
            "sim-tiny", before.rank, plan.plan_hash, plan.run_id)
        assert DOCKER_NAME.match(after.container) and after.labels == before.labels
        assert list(after.argv)[list(after.argv).index("--name") + 1] == after.container


def test_up_of_a_plan_whose_names_are_held_by_its_own_kept_containers(plan):
    """`up --redeploy` (serving) or `up A` after `up B` (A kept, stopped): the names are taken by our own
    containers of this plan, never a clash; the caller then names this run's containers with the run."""
    serving = {n: [ours(plan, r)] for r, n in enumerate(("spark-1", "spark-2"))}
    forced = decide(plan, serving, force=True)
    assert forced.action is Action.REPLACE and forced.names_taken and not forced.clashes
    kept = {n: [ours(plan, r, status="exited"), ours(plan, r, plan_hash=OLD)] for r, n in enumerate(("spark-1", "spark-2"))}
    back = decide(plan, kept, force=False)
    assert back.action is Action.REPLACE and back.names_taken and not back.clashes
    assert all(c.ours.plan_hash == OLD for cs in back.previous.values() for c in cs), "only what runs is stopped"


# ---- which container is the deployment now (status, logs) ---------------------------------------------
def test_current_is_the_running_one_whatever_the_names(plan):
    serving = ours(plan, 0, plan_hash=OLD, name="sd-sim-tiny-r0")  # an older spark-deploy's serving name
    kept = ours(plan, 0, status="exited", started_at="2026-12-04T09:00:00Z")
    assert current_of([kept, serving]) == [serving]


def test_with_nothing_running_the_one_started_last_is_current(plan):
    """A crashed release shows as exited (status says so); the releases kept before it do not show."""
    older = ours(plan, 0, plan_hash=OLD, status="exited", started_at="2026-12-04T09:00:00.5Z",
                 name="sd-sim-tiny-r0-20261204T085959Z-abcdef")
    crashed = ours(plan, 0, status="exited", started_at="2026-12-04T09:00:00.25Z")  # trimmed zeros: .250 < .5
    later = ours(plan, 0, status="exited", started_at="2026-12-04T09:00:00.6Z", plan_hash="fedcba9876543210")
    assert current_of([older, crashed]) == [older]
    assert current_of([older, crashed, later]) == [later]


def test_current_is_per_recipe_and_rank(plan):
    r0, r1 = ours(plan, 0), ours(plan, 1, status="exited")
    other = ours(plan, 0, recipe="other", status="exited")
    assert current_of([r0, r1, other]) == [r0, r1, other]


# ---- migration: an older spark-deploy's names --------------------------------------------------------
def _release(plan: Plan, run: str) -> Release:
    return Release(id=1, cluster=plan.cluster, recipe=plan.recipe, recipe_text="", recipe_digest="d",
                   inventory_digest="i", plan_hash=plan.plan_hash, run_id=run, container_run=run,
                   image_id=plan.image_id, image_ref=plan.image_ref,
                   ranks=[RankRecord(rank=l.rank, node=l.node.name, container=base_name(plan.recipe, l.rank), argv=[])
                          for l in plan.ranks],
                   model=ModelSeen(repo="r", revision="main"), by="me", command=[], started_at=1, updated_at=1)


def test_a_kept_container_an_older_spark_deploy_renamed_is_started_by_rollback(plan):
    """Release 1 was kept as `sd-sim-tiny-r0-RUN` by an older `up`: rollback finds it by plan hash and rank
    labels, and starts it under that name (Kept.name is the container's own)."""
    run = "20261101T000000Z-0ld0ld"
    old_kept = ours(plan, 0, status="exited", run=run, name=f"sd-sim-tiny-r0-{run}")
    same_plan_later = ours(plan, 0, status="exited", run="20261201T000000Z-111111")
    stranger_cluster = ours(plan, 0, status="exited", run=run, cluster="other-pair")
    found = pick_kept([same_plan_later, stranger_cluster, old_kept], _release(plan, run), 0, plan.cluster)
    assert found is old_kept and found.name == f"sd-sim-tiny-r0-{run}"
    assert pick_kept([ours(plan, 0)], _release(plan, run), 0, plan.cluster) is None, "a running one is not kept"
    assert pick_kept([old_kept], _release(plan, run).model_copy(update={"plan_hash": OLD}), 0, plan.cluster) is None


def test_an_older_spark_deploys_serving_containers_are_replaced_by_label_without_a_clash(plan):
    found = {"spark-1": [ours(plan, 0, plan_hash=OLD, name="sd-sim-tiny-r0"),
                         ours(plan, 0, plan_hash="fedcba9876543210", status="exited",
                              name="sd-sim-tiny-r0-20261101T000000Z-0ld0ld")],
             "spark-2": [ours(plan, 1, plan_hash=OLD, name="sd-sim-tiny-r1")]}
    decision = decide(plan, found, force=False)
    assert decision.action is Action.REPLACE and not decision.clashes and not decision.names_taken
    assert {n: [c.name for c in cs] for n, cs in decision.previous.items()} == {
        "spark-1": ["sd-sim-tiny-r0"], "spark-2": ["sd-sim-tiny-r1"]}
    same = {"spark-1": [ours(plan, 0, name="sd-sim-tiny-r0")], "spark-2": [ours(plan, 1, name="sd-sim-tiny-r1")]}
    assert decide(plan, same, force=False).action is Action.ALREADY_SERVING, "same plan hash: already serving"
