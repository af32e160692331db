"""Baseline facts (orchestrator/maintenance/collect.py): the image fact run for real against this host's
dockerd, and Observed facts (parsed by the preflight parsers from captured outputs) turned into NodeFacts."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from orchestrator.maintenance import collect
from orchestrator.window.baseline import BOOT_SERVING
from orchestrator.facts import boot as boot_facts
from orchestrator.facts.host import (
    parse_docker_info,
    parse_gpu,
    parse_os_release,
)
from orchestrator.facts.core import (
    DRIVER,
    FACTS,
    FactInput,
    Observed,
    driver_args,
    parse_framed,
)

SAMPLES = Path(__file__).parent / "samples"


class _Plan:
    def __init__(self, image_id):
        self.image_id = image_id


def _run_image_fact(image_id: str) -> Observed:
    fact = FACTS[collect.IMAGE_FACT]
    given = FactInput(node=None, dep=None, plan=_Plan(image_id))
    res = subprocess.run(["bash", "-c", DRIVER, "driver", *driver_args([fact], given)], check=False,
                         capture_output=True, text=True, timeout=60)
    return parse_framed(res.stdout, {fact.name: fact})[fact.name]


def test_image_fact_on_this_hosts_engine_present_and_absent():
    ids = subprocess.run(["docker", "images", "-q", "--no-trunc"], capture_output=True, text=True, check=True,
                         timeout=60).stdout.split()
    if not ids:
        pytest.fail("this host's engine holds no image to look at (the sim images are built by the integration tests)")
    present = _run_image_fact(ids[0])
    want = json.loads(subprocess.run(["docker", "image", "inspect", "--format", "{{json .RootFS.Layers}}", ids[0]],
                                     capture_output=True, text=True, check=True, timeout=60).stdout)
    assert present.ok and present.value == {"present": True, "diff_ids": want}
    absent = _run_image_fact("sha256:" + "0" * 64)
    assert absent.ok and absent.value["present"] is False


def test_image_fact_parser_refuses_garbage():
    assert collect.parse_image("unpinned\n")["unpinned"] is True
    with pytest.raises(ValueError):
        collect.parse_image("Cannot connect to the Docker daemon")
    with pytest.raises(TypeError):
        collect.parse_image('{"not": "a list"}')


def _gpu_output(driver: str = "580.159.03", clock: int = 3003) -> str:
    return f"NVIDIA GB10, {driver}, {clock}, 3003, Not Active, Not Active\nCUDA Version: 13.0\n"


def test_node_facts_from_parsed_observations_and_errors_named():
    seen = {
        "gpu": Observed(value=parse_gpu(_gpu_output())),
        "docker_info": Observed(value=parse_docker_info((SAMPLES / "docker-info.json").read_text())),
        "os_release": Observed(value=parse_os_release((SAMPLES / "os-release.txt").read_text())),
        "kernel": Observed(error="uname: command not found"),
        collect.IMAGE_FACT: Observed(value={"present": True, "diff_ids": ["sha256:a"]}),
    }
    facts = collect.node_facts("spark-2", seen, "sha256:" + "1" * 64)
    assert facts.gpu.driver == "580.159.03" and facts.gpu.cuda == "13.0" and not facts.gpu.locked
    assert (facts.docker_version, facts.docker_driver) == ("20.10.24+dfsg1", "overlay2")
    assert facts.os_release == "Debian GNU/Linux 12 (bookworm)"
    assert facts.kernel is None and facts.errors == {"kernel": "uname: command not found"}
    assert facts.image.present and facts.image.id.endswith("1" * 64)
    assert facts.on_boot is None and facts.units_enabled is None  # boot facts not gathered here


def test_boot_fields_from_captured_systemd_and_docker_outputs():
    assert BOOT_SERVING == str(boot_facts.BootMatch.SERVING)
    seen = {"boot_units": Observed(value=boot_facts.parse_boot_units((SAMPLES / "boot_units_systemd252.txt").read_text())),
            "restart_policies": Observed(value=boot_facts.parse_restart_policies(
                (SAMPLES / "boot_restart_policies.txt").read_text()))}
    facts = collect.node_facts("spark-2", seen, None, serving_plan="nothing-serves-with-this-plan")
    assert facts.systemd == "" and "old-vllm.service" in facts.units_enabled
    assert "bootcap-root-always: always" in facts.restart_policies
    assert not any(line.startswith("bootcap-root-none") for line in facts.restart_policies)  # policy "no"
    names = {e.name: e for e in facts.on_boot}
    assert names["old-vllm.service"].match == str(boot_facts.BootMatch.OTHER)
    assert names["bootcap-root-always"].kind == "container"
    assert facts.image is None  # no image pinned: not judged


def test_without_systemd_units_are_not_judged_but_restart_policies_are():
    seen = {"boot_units": Observed(value=boot_facts.parse_boot_units((SAMPLES / "boot_units_notpid1.txt").read_text())),
            "restart_policies": Observed(value=boot_facts.parse_restart_policies(
                (SAMPLES / "boot_restart_policies.txt").read_text()))}
    facts = collect.node_facts("spark-1", seen, None)
    assert facts.systemd and "PID 1" in facts.systemd and facts.units_enabled is None
    assert {e.name for e in facts.on_boot} >= {"bootcap-root-always"}
