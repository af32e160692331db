"""render/unit.py: the boot unit per node, from the same Plan as `up`. Pure, plus `systemd-analyze verify`
(systemd 252 on this machine, offline) on every rendered unit where it is installed.

How the quoting decodes was checked once on a real systemd 252 PID 1 (see docs/boot.md): a unit whose
ExecStart is `command_line([python3, -c, print(argv), *WEIRD])` printed WEIRD back exactly. The integration
test repeats that on the simulated systemd node.
"""

from __future__ import annotations

import shutil
import subprocess

import pytest
from fakes import deployment

from orchestrator.render.plan import build_plan
from orchestrator.render.unit import (
    UnitError,
    command_line,
    command_word,
    escape_name,
    render_unit,
    render_units,
    restart_burst,
    setting_value,
    unit_name,
)


def keys(text: str) -> dict[str, list[str]]:
    """Every Key=value of a unit (sections flattened), each key's values in order."""
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if line.strip() and not line.startswith(("#", "[")):
            key, _, value = line.partition("=")
            out.setdefault(key, []).append(value)
    return out


@pytest.fixture
def plan(tmp_path):
    return build_plan(deployment(tmp_path))


def test_head_starts_its_container_and_records_the_plan(plan):
    head = render_unit(plan, plan.head, 4)
    k = keys(head.text)
    assert head.name == "spark-deploy-unit-pair-sim-tiny.service" and head.path == f"/etc/systemd/system/{head.name}"
    name = f"sd-sim-tiny-r0-{plan.plan_hash[:8]}"  # the plan's name for it, which never changes
    assert k["ExecStart"] == [f'"docker" "start" "--attach" "{name}"']
    assert k["ExecStop"] == [f'"docker" "stop" "--time" "30" "{name}"']
    assert k["ExecStartPre"] == [f'"docker" "update" "--restart" "no" "{name}"']  # no wait on the head
    assert k["X-SparkDeploy-Container"] == [name] and head.container == name
    assert k["X-SparkDeploy-PlanHash"] == [plan.plan_hash] and k["X-SparkDeploy-Release"] == ["4"]
    assert k["Requires"] == ["docker.service"] and "docker.service" in k["After"][0]
    assert k["Restart"] == ["on-failure"] and k["Type"] == ["simple"]
    # 3 starts per 3 rendezvous timeouts: a head that waits out its rendezvous (600 s) and starts again
    # (15 s) is never stopped by the limit; one that crashes at start gets 3 starts
    assert k["StartLimitBurst"] == ["3"] and k["StartLimitIntervalSec"] == ["1800"]
    assert k["RestartPreventExitStatus"] == ["143 137 SIGKILL"] and k["RestartSec"] == ["15"]
    assert k["WantedBy"] == ["multi-user.target"] and k["TimeoutStartSec"] == ["120"]


def test_peer_waits_bounded_for_the_heads_rendezvous_in_execstart_not_in_the_boot(plan):
    """An ExecStartPre holds the unit `activating`, and the boot with it (multi-user.target waits for it,
    is-system-running says `starting`): the wait is in the ExecStart of the Type=simple unit instead."""
    peer = render_unit(plan, plan.ranks[1], 4, peer_wait=300)
    k = keys(peer.text)
    name = f"sd-sim-tiny-r1-{plan.plan_hash[:8]}"
    assert k["Type"] == ["simple"] and k["ExecStartPre"] == [f'"docker" "update" "--restart" "no" "{name}"']
    (start,) = k["ExecStart"]
    head = plan.head
    assert start.startswith('"bash" "-c" ')
    assert start.endswith(f'"wait-for-head" "{head.node.fabric_ip}" "{head.spec.master_port}" "300" '
                          f'"docker" "start" "--attach" "{name}"')
    assert "$$SECONDS" in start and "%%" in start and "$${!#}" in start  # systemd would expand $ and % otherwise
    assert k["TimeoutStartSec"] == ["120"]  # ExecStartPre only
    assert k["StartLimitIntervalSec"] == ["900"]  # 3 starts per 3 of its own (300 s) waits: it retries for ever


def test_the_unit_starts_the_container_boot_enable_found_by_its_labels(plan):
    """`up --redeploy` of the same plan, or a container an older spark-deploy named: the name is the one found."""
    for found in (f"sd-sim-tiny-r1-{plan.plan_hash[:8]}-20261201T000000Z-abc123", "sd-sim-tiny-r1"):
        peer = render_unit(plan, plan.ranks[1], 4, container=found)
        k = keys(peer.text)
        assert k["ExecStart"][0].endswith(f'"docker" "start" "--attach" "{found}"')
        assert k["X-SparkDeploy-Container"] == [found] and k["ExecStop"] == [f'"docker" "stop" "--time" "30" "{found}"']
        assert peer.container == found and k["X-SparkDeploy-PlanHash"] == [plan.plan_hash]


def test_peer_start_script_is_one_line_and_valid_bash():
    from orchestrator.render.unit import _PEER_START

    assert "\n" not in _PEER_START
    subprocess.run(["bash", "-n", "-c", _PEER_START], check=True)


def _fake_docker(tmp_path, running: str) -> dict:
    """A `docker` on PATH that answers `container inspect` with `running` and logs every other call."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "docker").write_text('#!/bin/sh\nif [ "$1" = container ]; then echo %s; exit 0; fi\n'
                                    'echo "docker $*" >> "%s"\n' % (running, tmp_path / "calls"))
    (bin_dir / "docker").chmod(0o755)
    import os
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}


def test_peer_start_gives_up_after_its_bound_and_starts_nothing(tmp_path):
    from orchestrator.render.unit import _PEER_START

    # port 9 on loopback: nothing listens; a 2 s bound ends it with exit 1 and says so (systemd retries)
    done = subprocess.run(["bash", "-c", _PEER_START, "wait-for-head", "127.0.0.1", "9", "2",
                           "docker", "start", "--attach", "sd-x-r1"], env=_fake_docker(tmp_path, "false"),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 1
    assert "waiting for the head's rendezvous at 127.0.0.1:9 (up to 2 s)" in done.stdout
    assert "did not listen within 2 s" in done.stdout
    assert not (tmp_path / "calls").exists()


def test_peer_start_runs_the_container_once_the_head_listens(tmp_path):
    import socket

    from orchestrator.render.unit import _PEER_START

    with socket.socket() as srv:
        srv.bind(("127.0.0.1", 0))
        srv.listen()
        port = str(srv.getsockname()[1])
        done = subprocess.run(["bash", "-c", _PEER_START, "wait-for-head", "127.0.0.1", port, "20",
                               "docker", "start", "--attach", "sd-x-r1"], env=_fake_docker(tmp_path, "false"),
                              capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"the head's rendezvous at 127.0.0.1:{port} listens" in done.stdout
    assert (tmp_path / "calls").read_text() == "docker start --attach sd-x-r1\n"


def test_peer_start_attaches_to_a_running_container_without_waiting(tmp_path):
    """`boot enable` starts the unit while the release serves: the head's rendezvous no longer listens."""
    from orchestrator.render.unit import _PEER_START

    done = subprocess.run(["bash", "-c", _PEER_START, "wait-for-head", "127.0.0.1", "9", "600",
                           "docker", "start", "--attach", "sd-x-r1"], env=_fake_docker(tmp_path, "true"),
                          capture_output=True, text=True, timeout=30)
    assert done.returncode == 0 and "sd-x-r1 runs: attaching to it" in done.stdout, done.stdout
    assert "waiting" not in done.stdout
    assert (tmp_path / "calls").read_text() == "docker start --attach sd-x-r1\n"


def test_recipe_restart_bound_becomes_the_burst_and_is_recorded(tmp_path):
    def restart(r):
        r["docker"]["restart"] = {"policy": "on-failure", "max_retries": 5}

    plan = build_plan(deployment(tmp_path, restart))
    unit = render_unit(plan, plan.head, 1)
    assert restart_burst(plan.head) == 6  # the first start plus 5 retries
    assert keys(unit.text)["X-SparkDeploy-DockerRestart"] == ["on-failure:5"]
    assert keys(unit.text)["StartLimitBurst"] == ["6"] and keys(unit.text)["StartLimitIntervalSec"] == ["3600"]


def test_no_secret_reaches_the_unit(tmp_path):
    def secret(r):
        r["secrets"] = ["HF_TOKEN"]

    plan = build_plan(deployment(tmp_path, secret))
    for unit in render_units(plan, 1):
        assert "HF_TOKEN" not in unit.text and "env-file" not in unit.text and "Environment" not in unit.text


def test_quoting():
    assert command_word("plain") == '"plain"'
    assert command_word('a "b" \\c') == '"a \\"b\\" \\\\c"'
    assert command_word("100% $HOME ${X}") == '"100%% $$HOME $${X}"'
    assert command_word("a\nb\tc") == '"a\\nb\\tc"'
    assert command_word("") == '""'
    assert command_line(["x", ";"]) == '"x" ";"'
    with pytest.raises(UnitError):
        command_word("nul\x00")
    assert setting_value(" 50% done ") == "50%% done"
    with pytest.raises(UnitError):
        setting_value("two\nlines")


def test_unit_names_escape_what_systemd_refuses():
    assert escape_name("pair-1.lab") == "pair-1.lab"
    assert escape_name("a b/c") == "a\\x20b-c"
    assert escape_name(".hidden") == "\\x2ehidden"
    assert unit_name("spark pair", "m") == "spark-deploy-spark\\x20pair-m.service"


def test_a_value_that_is_not_plain_cannot_reach_a_key(plan):
    from dataclasses import replace

    with pytest.raises(UnitError, match="not a plain value"):
        render_unit(replace(plan, cluster="bad\nname"), plan.head, 1)


@pytest.mark.skipif(shutil.which("systemd-analyze") is None, reason="not on this host: systemd-analyze")
def test_systemd_analyze_verifies_every_rendered_unit(plan, tmp_path):
    for unit in render_units(plan, 3):
        path = tmp_path / unit.node / unit.name
        path.parent.mkdir()
        path.write_text(unit.text)
        done = subprocess.run(["systemd-analyze", "verify", str(path)], capture_output=True, text=True, timeout=60)
        # no complaint at all: an unknown key or unbalanced quoting is printed here even when the exit code is 0
        assert done.returncode == 0 and done.stderr.strip() == "", done.stderr
