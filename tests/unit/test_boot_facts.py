"""Boot facts and the `boot` check: parsers on outputs captured from real systemd 252 (PID 1 in a Debian
bookworm container, units planted there: another stack's `docker run`, a compose unit, a bash -c with a
newline, our own rendered peer unit, docker/containerd enabled or not) and from this machine's dockerd
(`docker container inspect` in the fact's format, containers with each restart policy); judges on what
those parsers return. Pure: no node is contacted.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from fakes import deployment

from orchestrator.facts.boot import (
    BootMatch,
    ItemKind,
    boot_items,
    exec_argv,
    node_boot,
    parse_boot_units,
    parse_restart_policies,
    parse_systemctl_show,
    serving_comes_back,
)
from orchestrator.facts.core import Observed
from orchestrator.preflight.checks_boot import boot
from orchestrator.checks.verdict import Status
from orchestrator.preflight.registry import CHECKS
from orchestrator.render.plan import build_plan

SAMPLES = Path(__file__).parent / "samples"


def sample(name: str) -> str:
    return (SAMPLES / name).read_text()


def policy_line(name: str, labels: dict, *, policy: str = "no", retries: int = 0, status: str = "running",
                ref: str = "vllm-sim:latest") -> str:
    """One line of the restart_policies fact's output, shaped like the captured sample."""
    return json.dumps({"Id": f"{abs(hash(name)):064x}"[:64], "Name": f"/{name}", "Image": "sha256:" + "2c" * 32,
                       "Ref": ref, "State": {"Status": status, "ExitCode": 0},
                       "Restart": {"MaximumRetryCount": retries, "Name": policy}, "Config": {"Labels": labels}})


def our_lines(plan, *, policy: str = "no", retries: int = 0, plan_hash: str | None = None, status="running",
              old_names: bool = False):
    """Per node, the lines for `plan`'s containers (with our labels). `old_names`: named `sd-RECIPE-rN`, as
    an older spark-deploy named them (the captured units start them by those names)."""
    out = {}
    for launch in plan.ranks:
        labels = dict(launch.labels.pairs())
        if plan_hash:
            labels["spark-deploy.plan-hash"] = plan_hash
        name = f"sd-{plan.recipe}-r{launch.rank}" if old_names else launch.container
        out[launch.node.name] = [policy_line(name, labels, policy=policy, retries=retries, status=status)]
    return out


def seen_of(units_text: dict[str, str], lines: dict[str, list[str]]) -> dict[str, dict[str, Observed]]:
    return {node: {"boot_units": Observed(parse_boot_units(units_text[node])),
                   "restart_policies": Observed(parse_restart_policies("\n".join(lines.get(node, []))))}
            for node in units_text}


# ---- parsers ------------------------------------------------------------------------------------------

def test_systemd_units_parsed_from_real_systemd_252():
    u = parse_boot_units(sample("boot_units_systemd252.txt"))
    assert u.systemd and u.engine_enabled and u.containerd_enabled
    ids = [x.id for x in u.units]
    # docker.service (dockerd), containerd, ssh, e2scrub: enabled but start no container; the template getty@ left out
    assert ids == ["multiline-stack.service", "old-vllm.service", "spark-deploy-unit-pair-sim-tiny.service",
                   "stack-compose.service"]
    old = next(x for x in u.units if x.id == "old-vllm.service")
    assert old.exec_start == ("/usr/bin/docker run --rm --name old-vllm --gpus all -p 8000:8000 "
                              "vllm/vllm-openai:v0.9.1 --model meta-llama/Llama 3",)
    assert old.exec_start_pre == ("/usr/bin/docker rm -f old-vllm",)
    assert old.started_container() is None and not old.ours
    multi = next(x for x in u.units if x.id == "multiline-stack.service")
    assert multi.exec_start == ("/bin/bash -c docker pull other/vllm:old\ndocker run --rm --name legacy other/vllm:old",)
    ours = next(x for x in u.units if x.ours)
    assert ours.started_container() == "sd-sim-tiny-r1"
    assert ours.key("Recipe") == "sim-tiny" and ours.key("Release") == "7" and len(ours.key("PlanHash")) == 16
    assert dict(u.our_files) == {"spark-deploy-unit-pair-old-recipe.service": "disabled",
                                 "spark-deploy-unit-pair-sim-tiny.service": "enabled"}


def test_engine_disabled_sample():
    u = parse_boot_units(sample("boot_units_engine_disabled.txt"))
    assert u.systemd and not u.engine_enabled and not u.containerd_enabled and u.units == ()
    assert dict(u.our_files)["spark-deploy-unit-pair-sim-tiny.service"] == "disabled"


@pytest.mark.parametrize("name, why", [("boot_units_nosystemctl.txt", "systemctl is not installed"),
                                       ("boot_units_notpid1.txt", "PID 1 is docker-init, not systemd")])
def test_no_systemd_says_why(name, why):
    u = parse_boot_units(sample(name))
    assert not u.systemd and u.why == why


def test_show_refuses_what_it_cannot_read():
    with pytest.raises(ValueError, match="unexpected ExecStart"):
        exec_argv("{ path=/usr/bin/docker ; something else }")
    with pytest.raises(ValueError, match="no @@enabled"):
        parse_boot_units("garbage\n")


def test_show_keeps_repeated_properties_in_order():
    blocks = parse_systemctl_show("Id=a.service\nExecStart={ argv[]=x 1 ; ignore_errors=no }\n"
                                  "ExecStart={ argv[]=x 2 ; ignore_errors=no }\n\nId=b.service\n")
    assert [b["Id"] for b in blocks] == [["a.service"], ["b.service"]]
    assert [exec_argv(v) for v in blocks[0]["ExecStart"]] == ["x 1", "x 2"]


def test_restart_policies_from_real_dockerd():
    found = {p.container.name: p for p in parse_restart_policies(sample("boot_restart_policies.txt"))}
    back = {n for n, p in found.items() if p.comes_back}
    assert back == {"bootcap-root-always", "bootcap-root-unless", "bootcap-root-onfail0"}  # not on-failure:3, not no
    assert found["bootcap-root-onfail3"].policy_text() == "on-failure:3"
    assert found["sd-tiny-r0-bootcap-root"].plan_hash == "0123456789abcdef"
    assert found["bootcap-root-always"].ref == "vllm-sim:latest"


def test_unless_stopped_that_was_stopped_does_not_come_back():
    p = parse_restart_policies(policy_line("x", {}, policy="unless-stopped", status="exited"))[0]
    assert not p.comes_back
    p = parse_restart_policies(policy_line("x", {}, policy="always", status="exited"))[0]
    assert p.comes_back


# ---- judgement ----------------------------------------------------------------------------------------

@pytest.fixture
def plan(tmp_path):
    return build_plan(deployment(tmp_path))


def test_other_stack_fails_and_names_unit_and_container(plan):
    """Acceptance 1's shape: another stack's unit and an unless-stopped container on spark-2."""
    lines = our_lines(plan, old_names=True)  # the captured unit starts sd-sim-tiny-r1: never renamed, it still is
    lines["spark-2"].append(policy_line("legacy", {}, policy="unless-stopped", ref="other/vllm:old"))
    obs = seen_of({"spark-2": sample("boot_units_systemd252.txt")}, lines)
    items = boot_items(obs["spark-2"], plan.plan_hash)
    by = {(i.kind, i.name): i for i in items}
    assert by[(ItemKind.UNIT, "old-vllm.service")].match is BootMatch.OTHER
    assert "vllm/vllm-openai:v0.9.1" in by[(ItemKind.UNIT, "old-vllm.service")].starts
    assert by[(ItemKind.CONTAINER, "legacy")].match is BootMatch.OTHER
    assert "other/vllm:old" in by[(ItemKind.CONTAINER, "legacy")].starts
    assert by[(ItemKind.CONTAINER, "legacy")].status is Status.FAIL
    # our unit there starts sd-sim-tiny-r1, which exists and carries the serving plan
    ours = by[(ItemKind.UNIT, "spark-deploy-unit-pair-sim-tiny.service")]
    assert ours.match is BootMatch.SERVING and ours.plan_hash == plan.plan_hash


def test_check_verdict_per_node(plan, tmp_path):
    dep = deployment(tmp_path)
    lines = our_lines(plan)
    lines["spark-2"].append(policy_line("legacy", {}, policy="unless-stopped", ref="other/vllm:old"))
    seen = seen_of({"spark-1": sample("boot_units_engine_disabled.txt"),
                    "spark-2": sample("boot_units_systemd252.txt")}, lines)
    v = boot(seen, dep)
    assert v.cells["spark-2"].status is Status.FAIL
    assert "old-vllm.service" in v.cells["spark-2"].value and "legacy" in v.cells["spark-2"].value
    # spark-1: nothing comes back (docker not even enabled): the serving release does not come back
    assert v.cells["spark-1"].status is Status.WARN
    assert "does not come back" in v.cells["spark-1"].value and "docker.service is not enabled" in v.cells["spark-1"].value
    assert "spark-2: unit old-vllm.service" in v.fix and "spark-2: container legacy" in v.fix
    assert v.field_note == 9


def test_serving_comes_back_is_ok(plan, tmp_path):
    dep = deployment(tmp_path)
    text = sample("boot_units_rendered_peer.txt")
    seen = seen_of({"spark-1": text, "spark-2": text}, our_lines(plan, old_names=True))  # starts sd-sim-tiny-r1
    nb = node_boot(seen["spark-2"], {plan.plan_hash})
    assert serving_comes_back(nb.items)
    v = boot(seen, dep)
    # spark-2's unit brings back its rank; the other units in the sample are other stacks
    assert [i.name for i in nb.items if i.match is BootMatch.SERVING] == ["spark-deploy-unit-pair-sim-tiny.service"]
    assert v.cells["spark-2"].status is Status.FAIL  # old-vllm and multiline-stack are enabled there too
    assert "spark-deploy-unit-pair-sim-tiny.service comes back and matches the serving release" in v.cells["spark-2"].value


def test_our_unit_whose_container_is_gone_warns(plan):
    obs = seen_of({"n": sample("boot_units_rendered_peer.txt")}, {"n": []})["n"]
    item = next(i for i in boot_items(obs, plan.plan_hash) if i.name.startswith("spark-deploy-"))
    assert item.match is BootMatch.BROKEN and item.status is Status.WARN and "does not exist" in item.starts


def test_a_stale_release_of_ours_is_another_stack(plan):
    """Our own labelled container of an older plan with a restart policy that brings it back."""
    lines = {"n": our_lines(plan, policy="always", plan_hash="00000000deadbeef")["spark-1"]}
    socket_only = sample("boot_units_engine_disabled.txt").replace("@@ourfiles", "docker.socket enabled enabled\n@@ourfiles")
    obs = seen_of({"n": socket_only}, lines)["n"]
    (item,) = boot_items(obs, plan.plan_hash)
    assert item.kind is ItemKind.CONTAINER and item.match is BootMatch.OTHER and "00000000deadbeef" in item.starts


def test_restart_policies_do_not_count_when_docker_does_not_start(plan):
    lines = {"n": [policy_line("legacy", {}, policy="always")]}
    obs = seen_of({"n": sample("boot_units_engine_disabled.txt")}, lines)["n"]
    assert boot_items(obs, plan.plan_hash) == []


def test_non_systemd_node_skips_saying_why_unless_a_restart_policy_brings_another_stack_back(plan, tmp_path):
    dep = deployment(tmp_path)
    text = sample("boot_units_notpid1.txt")
    seen = seen_of({"spark-1": text, "spark-2": text}, our_lines(plan))
    v = boot(seen, dep)
    assert {c.status for c in v.cells.values()} == {Status.SKIP}
    assert "no systemd here (PID 1 is docker-init, not systemd)" in v.cells["spark-1"].value
    lines = our_lines(plan)
    lines["spark-2"].append(policy_line("legacy", {}, policy="unless-stopped"))
    v = boot(seen_of({"spark-1": text, "spark-2": text}, lines), dep)
    assert v.cells["spark-1"].status is Status.SKIP and v.cells["spark-2"].status is Status.FAIL


def test_a_fact_that_failed_skips_with_its_error(plan, tmp_path):
    dep = deployment(tmp_path)
    seen = seen_of({"spark-1": sample("boot_units_notpid1.txt"), "spark-2": sample("boot_units_notpid1.txt")},
                   our_lines(plan))
    seen["spark-2"]["restart_policies"] = Observed(error="Cannot connect to the Docker daemon")
    v = boot(seen, dep)
    assert v.cells["spark-2"].status is Status.SKIP and "Cannot connect" in v.cells["spark-2"].value


def test_boot_is_registered_outside_ups_subset():
    spec = CHECKS["boot"]
    assert spec.facts == ("boot_units", "restart_policies") and spec.in_up is False and spec.field_note == 9


def test_sim_head_with_our_unit_enabled_is_ok(tmp_path):
    """Captured on a simulated systemd node after `up` and `boot enable`: our head unit and its container."""
    units = parse_boot_units(sample("boot_units_sim_head.txt"))
    containers = parse_restart_policies(sample("boot_restart_sim_head.txt"))
    assert [u.id for u in units.units] == ["spark-deploy-sim-bootdbg-sim-tiny.service"]  # sim-boot, ssh: no docker
    (c,) = containers
    plan = c.plan_hash
    items = boot_items({"boot_units": Observed(units), "restart_policies": Observed(containers)}, plan)
    assert [(i.kind, i.match) for i in items] == [(ItemKind.UNIT, BootMatch.SERVING)]
    assert "sd-sim-tiny-r0" in items[0].starts and "sha256:c526c3081f60" in items[0].starts
    assert "sha256:c526c3081f60baff" not in items[0].starts  # an image ID is shown short
    other = boot_items({"boot_units": Observed(units), "restart_policies": Observed(containers)}, "0" * 16)
    assert [i.match for i in other] == [BootMatch.OTHER]


def test_units_behind_names_the_nodes_whose_unit_brings_back_an_earlier_release(tmp_path):
    """After an `up`, boot.follow re-enables boot where our unit of the recipe recorded another release
    (captured systemd 252 node: the unit of cluster sim-bootdbg, recipe sim-tiny, release 1)."""
    from orchestrator.deploy.boot import units_behind

    dep = deployment(tmp_path, inventory=lambda i: i.update(cluster="sim-bootdbg"))
    units = Observed(parse_boot_units(sample("boot_units_sim_head.txt")))
    seen = {"spark-1": {"boot_units": units}, "spark-2": {"boot_units": Observed(error="unreachable")}}
    assert units_behind(seen, dep.inventory, "sim-tiny", 2) == {"spark-1": "1"}
    assert units_behind(seen, dep.inventory, "sim-tiny", 1) == {}  # the unit brings back the serving release
    assert units_behind(seen, dep.inventory, "other-recipe", 2) == {}  # no unit of that recipe


def test_our_peer_unit_names_its_container_through_its_wrapper():
    """Captured from the simulated systemd 252 node after `boot enable`: the peer's ExecStart is `bash -c SCRIPT
    ... docker start --attach NAME` (its wait is in ExecStart, not in the boot); the container is still read."""
    u = parse_boot_units(sample("boot_units_sim_peer.txt"))
    ours = next(x for x in u.units if x.ours)
    assert ours.exec_start[0].startswith("bash -c ")
    assert ours.started_container() == "sd-sim-tiny-r1-564c4894" == ours.key("Container")
