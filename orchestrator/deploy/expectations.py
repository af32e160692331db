"""Did the requested settings take effect? Checked per node from the log lines vLLM printed.

"It ran without error" is not "it took effect" (field note 6); the ranks must agree (field note 3).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Literal

from ..config.recipe import Recipe

Status = Literal["ok", "failed", "not applicable", "waiting"]


@dataclass
class ExpectationResult:
    name: str
    status: Status
    per_node: dict[str, str | None]  # the line (or value) each node printed, None when absent
    detail: str
    nodes: list[str] = field(default_factory=list)  # the nodes that fail it (named in the error and the audit)

    @property
    def ok(self) -> bool:
        return self.status in ("ok", "not applicable")


def _value(found: re.Match) -> str:
    return found.groupdict().get("value") or found.group(0)


def _first(lines: list[str], pattern: re.Pattern) -> re.Match | None:
    for line in lines:
        found = pattern.search(line)
        if found:
            return found
    return None


def evaluate(recipe: Recipe, logs: dict[str, list[str]], final: bool) -> list[ExpectationResult]:
    """Results for every expectation; with final=False, absent lines are "waiting" rather than failed."""
    results: list[ExpectationResult] = []
    for line in recipe.expect.lines:
        nodes = list(logs) if line.nodes == "all" else list(line.nodes)
        pattern = re.compile(line.pattern)
        seen = {node: (_first(logs.get(node, []), pattern)) for node in nodes}
        per_node = {node: (m.group(0) if m else None) for node, m in seen.items()}
        missing = [node for node, m in seen.items() if m is None]
        wrong = [node for node, m in seen.items() if m is not None and line.contains and line.contains not in _value(m)]
        if wrong:
            shown = "; ".join(f"{n}: {per_node[n]!r}" for n in wrong)
            results.append(ExpectationResult(line.name, "failed", per_node, f"expected {line.contains!r}, got {shown}",
                                             wrong))
        elif missing:
            status: Status = "failed" if final else "waiting"
            results.append(ExpectationResult(line.name, status, per_node,
                                             f"no line matching {line.pattern!r} on {', '.join(missing)}", missing))
        else:
            want = f" containing {line.contains!r}" if line.contains else ""
            results.append(ExpectationResult(line.name, "ok", per_node, f"seen on every node{want}"))
    for same in recipe.expect.identical:
        pattern = re.compile(same.pattern)
        seen = {node: _first(lines, pattern) for node, lines in logs.items()}
        per_node = {node: (_value(m) if m else None) for node, m in seen.items()}
        present = {node: v for node, v in per_node.items() if v is not None}
        if not present and recipe.vllm.enforce_eager:
            results.append(ExpectationResult(same.name, "not applicable", per_node,
                                             "--enforce-eager: no CUDA graphs, so no line to compare"))
        elif len(set(present.values())) > 1:
            shown = "; ".join(f"{n}: {v!r}" for n, v in per_node.items())
            results.append(ExpectationResult(same.name, "failed", per_node, f"nodes disagree: {shown}",
                                             list(per_node)))
        elif len(present) < len(per_node):
            missing = [n for n, v in per_node.items() if v is None]
            status = "failed" if final else "waiting"
            results.append(ExpectationResult(same.name, status, per_node,
                                             f"no line matching {same.pattern!r} on {', '.join(missing)}", missing))
        else:
            results.append(ExpectationResult(same.name, "ok", per_node, "identical on every node"))
    return results


_IB = re.compile(r"NET/IB : Using (?P<value>\S+)")
_SOCKET = re.compile(r"NET/Socket : Using (?P<value>.+)")


def transport(profile: str, debug: dict[str, str], logs: dict[str, list[str]]) -> ExpectationResult | None:
    """Profile roce promises NCCL's IB transport: a node whose NCCL fell back to sockets (an NCCL_IB_HCA
    that matches no active port, no /dev/infiniband in the container) still serves, at a fraction of the
    bandwidth, and says so only in its `NET/Socket : Using` line (field note 12). `debug`: each node's
    NCCL_DEBUG (the line is printed only at INFO). None for profile tcp. Never "waiting": the line comes
    at NCCL's init, before the API serves, so there is nothing to wait for."""
    if profile != "roce":
        return None
    per_node: dict[str, str | None] = {}
    fell_back, silent, missing = [], [], []
    for node, lines in logs.items():
        ib, sock = _first(lines, _IB), _first(lines, _SOCKET)
        per_node[node] = f"NET/IB {_value(ib)}" if ib else f"NET/Socket {_value(sock)}" if sock else None
        if sock and not ib:
            fell_back.append(node)
        elif not ib:
            (silent if debug.get(node, "").upper() not in ("INFO", "TRACE") else missing).append(node)
    if fell_back:
        shown = "; ".join(f"{n}: {per_node[n]}" for n in fell_back)
        return ExpectationResult("nccl-transport", "failed", per_node,
                                 f"profile roce, but NCCL fell back to sockets on {', '.join(fell_back)} ({shown}): "
                                 "check NCCL_IB_HCA against the node's HCA (preflight roce-hca) and that the "
                                 "container gets /dev/infiniband", fell_back)
    if missing:  # NCCL prints it at init, long before the API serves: absent here is absent (a container
        # kept from before the roce profile rendered NCCL_DEBUG, a recipe's NCCL_DEBUG_SUBSYS without NET)
        return ExpectationResult("nccl-transport", "not applicable", per_node,
                                 f"no NCCL transport line (NET/IB or NET/Socket) on {', '.join(missing)}: "
                                 "could not check which transport NCCL took there")
    if silent:
        return ExpectationResult("nccl-transport", "not applicable", per_node,
                                 f"NCCL_DEBUG is not INFO on {', '.join(silent)}: NCCL does not say which transport "
                                 "it took there (could not check)")
    return ExpectationResult("nccl-transport", "ok", per_node, "NET/IB on every node")
