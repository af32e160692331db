"""The facts driver (facts/core.DRIVER) on an in-memory node, and each fact it runs.

The driver and every fact's script are recognised by IDENTITY with the registry's constants
(`script is FACTS[name].script`, the module constants of facts/*.py); each answer is what that script
prints on a simulated node: from the node's model (containers, images, boot id, systemd) or, for the
host's fixed hardware and OS, the outputs captured on a simulated node in tests/unit/samples that the
parsers' own unit tests read. A fact the model does not answer is an AssertionError naming it.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable

from orchestrator.facts import engine
from orchestrator.facts.core import ENGINE_SCRIPT, FACTS, SEP, Source

from .docker import Answer, unknown
from .model import Node

SAMPLES = Path(__file__).parent.parent / "unit" / "samples"
KERNEL = "6.8.0-1013-nvidia-64k"  # the sim node's `uname -r` (a DGX OS kernel)
GPU_QUERY_LINE = "NVIDIA GB10, 580.126.09, 2405, 3003, Active, Not Active"  # the query, as test_boot_cache has it


def _sample(name: str) -> Callable[..., Answer]:
    return lambda node, *args: (0, (SAMPLES / name).read_text(), "")


def _kernel(node: Node) -> Answer:
    return 0, KERNEL + "\n", ""


def _gpu(node: Node, boot_id: str = "", text: str = "") -> Answer:
    """GPU_SCRIPT: the live query line, then the CUDA line: remembered on this boot, else from the full
    report (samples/nvidia-smi-gb10-580.126.09.txt, as `grep -oE` cuts it out)."""
    if boot_id and boot_id == node.boot_id:
        return 0, f"{GPU_QUERY_LINE}\n{text}\n", ""
    report = (SAMPLES / "nvidia-smi-gb10-580.126.09.txt").read_text()
    cuda = re.findall(r"CUDA (?:UMD )?Version: [0-9.]+", report)
    return 0, GPU_QUERY_LINE + "\n" + "".join(c + "\n" for c in cuda), ""


def _model_snapshot(node: Node, cache: str, repo: str, revision: str) -> Answer:
    """facts/model._SCRIPT over the node's HF cache: every revision resolves to the model's commit, whose
    snapshot directory holds no files in this model (files are not modelled)."""
    root = f"{cache}/hub/models--{repo.replace('/', '--')}"
    return 0, f"root\t{root}\ncommit\t{node.commit(repo, revision)}\n", ""


def _maintenance_image(node: Node, image_id: str = "") -> Answer:  # collect._IMAGE
    if not image_id:
        return 0, "unpinned\n", ""
    image = node.image(image_id)
    return 0, (json.dumps(list(image.layers)) + "\n") if image else "absent\n", ""


def _boot_id(node: Node) -> Answer:  # cat /proc/sys/kernel/random/boot_id
    return 0, node.boot_id + "\n", ""


def _boot_units(node: Node) -> Answer:
    return node.systemd.boot_units(node)


def _restart(node: Node, fmt: str) -> Answer:
    from .systemd import restart_policies
    return restart_policies(node, fmt)


def listening(node: Node) -> str:
    """`ss -Hltnpe` on the node: a root-owned vllm process on each port a container of ours listens on."""
    return "".join(f"LISTEN 0 4096 0.0.0.0:{p} 0.0.0.0:* users:((\"vllm\",pid=644,fd=5)) ino:4242 "
                   f"sk:1 cgroup:/system.slice/docker.service <->\n" for p in node.listening())


def _script(handler: str) -> Callable[..., Answer]:
    """A fact whose script is one of the product's scripts (facts/look.py): scripts.py's handler answers."""
    def answer(node: Node, *args: str) -> Answer:
        from . import scripts  # scripts imports this module
        return getattr(scripts, handler)(node, *args)
    return answer


ANSWERS: dict[str, Callable[..., Answer]] = {
    "boot_id": _boot_id, "boot_units": _boot_units, "restart_policies": _restart, "kernel": _kernel,
    "gpu": _gpu, "docker_info": _sample("docker-info.json"), "os_release": _sample("os-release.txt"),
    "meminfo": _sample("meminfo-sim-spark-idle.txt"), "model_snapshot": _model_snapshot,
    "maintenance_image": _maintenance_image,
    "image_refs": _script("_image_inspect"), "image_help": _script("_image_help"), "recipe_or_named": _script("_recipe_or_named"),
    "listeners": lambda node: (0, listening(node), ""),
}


def _engine(node: Node, count: str, *argv: str) -> Answer:
    """engine.script: the facts with an Engine API op, framed as engine_probe frames them (a Spark has
    python3 and the docker group may read the socket); each answer is the one its CLI script gets here."""
    return driver(node, *argv[int(count):], source=Source.ENGINE_API)


def fact_answer(node: Node, name: str, script: str, args: list[str]) -> Answer:
    if name == engine.ENGINE and script is ENGINE_SCRIPT:
        return _engine(node, *args)
    spec = FACTS.get(name)
    if spec is None or script is not spec.script or name not in ANSWERS:
        raise unknown(f"fact script {script[:60]!r}...")
    return ANSWERS[name](node, *args)


def driver(node: Node, *argv: str, source: Source = Source.SCRIPT) -> Answer:
    """facts.DRIVER: per fact (name, script, argc, args...), its header and stdout, then its stderr."""
    out, rest = [], list(argv)
    while rest:
        name, script, count = rest[0], rest[1], int(rest[2])
        args, rest = rest[3:3 + count], rest[3 + count:]
        code, stdout, stderr = fact_answer(node, name, script, args)
        by = f" {source}" if source is not Source.SCRIPT else ""
        out.append(f"{SEP}F {name} {code}{by}\n{stdout}\n{SEP}E\n{stderr}")  # stdout as printed (parse_framed strips)
    return 0, "".join(out), ""
