"""The preflight facts driver (preflight/facts._DRIVER) on an in-memory node, and each fact it runs.

The driver and every fact's script are recognised by IDENTITY with the registry's constants
(`script is FACTS[name].script`, the module constants of preflight/*.py); each answer is what that script
prints on a simulated node: from the node's model (containers, images, boot id, systemd) or, for the
host's fixed hardware and OS, the outputs captured on a simulated node in tests/unit/samples that the
parsers' own unit tests read. A fact the model does not answer is an AssertionError naming it.
"""

from __future__ import annotations

from typing import Callable

from orchestrator.preflight.facts import FACTS, SEP

from .docker import Answer, unknown
from .model import Node


def _boot_id(node: Node) -> Answer:  # cat /proc/sys/kernel/random/boot_id
    return 0, node.boot_id + "\n", ""


def _boot_units(node: Node) -> Answer:
    return node.systemd.boot_units(node)


def _restart(node: Node, fmt: str) -> Answer:
    from .systemd import restart_policies
    return restart_policies(node, fmt)


ANSWERS: dict[str, Callable[..., Answer]] = {
    "boot_id": _boot_id, "boot_units": _boot_units, "restart_policies": _restart,
}


def fact_answer(node: Node, name: str, script: str, args: list[str]) -> Answer:
    spec = FACTS.get(name)
    if spec is None or script is not spec.script or name not in ANSWERS:
        raise unknown(f"fact script {script[:60]!r}...")
    return ANSWERS[name](node, *args)


def driver(node: Node, *argv: str) -> Answer:
    """facts._DRIVER: per fact (name, script, argc, args...), its header and stdout, then its stderr."""
    out, rest = [], list(argv)
    while rest:
        name, script, count = rest[0], rest[1], int(rest[2])
        args, rest = rest[3:3 + count], rest[3 + count:]
        code, stdout, stderr = fact_answer(node, name, script, args)
        out.append(f"{SEP}F {name} {code}\n{stdout.rstrip(chr(10))}\n{SEP}E\n{stderr}")
    return 0, "".join(out), ""
