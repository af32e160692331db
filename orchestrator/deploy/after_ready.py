"""Facts recorded once a release serves: each node's MemAvailable and swap, and the engine's KV-cache lines.

Field note 8's 0.78 left ~2 GiB of ~116 once it served, and nothing recorded it; the KV-cache size and the
maximum concurrency the engine settled on are in its log once and nowhere else.
"""
from __future__ import annotations

import re

from ..facts.memory import GIB, parse_meminfo

KV_SIZE = re.compile(r"GPU KV cache size: ([\d,]+) tokens, Maximum concurrency for ([\d,]+) tokens per request: "
                     r"([\d.]+)x")
KV_MEMORY = re.compile(r"Available KV cache memory: ([\d.]+) GiB")


def kv_lines(lines: list[str]) -> dict:
    """The last KV-cache lines of one node's log (the size line comes from the head's EngineCore only)."""
    out: dict = {}
    for line in lines:
        if m := KV_SIZE.search(line):
            out.update(kv_cache_tokens=int(m.group(1).replace(",", "")),
                       per_request_tokens=int(m.group(2).replace(",", "")), max_concurrency=float(m.group(3)),
                       kv_line=line[m.start():].strip())
        if m := KV_MEMORY.search(line):
            out["kv_cache_memory_gib"] = float(m.group(1))
    return out


def memory(meminfo: str) -> dict:
    info = parse_meminfo(meminfo)
    return {"mem_available_gib": round(info.available / GIB, 2), "mem_total_gib": round(info.total / GIB, 2),
            "swap_total_gib": round(info.swap_total / GIB, 2), "swap_free_gib": round(info.swap_free / GIB, 2)}


def facts(meminfo: dict[str, str | None], logs: dict[str, list[str]], reserve_gib: float) -> dict:
    """Pure: node -> memory and KV figures; `under_reserve` names the nodes left with less than the reserve."""
    nodes: dict[str, dict] = {}
    for node in logs.keys() | meminfo.keys():
        entry: dict = {}
        text = meminfo.get(node)
        if text is not None:
            try:
                entry.update(memory(text))
            except ValueError as exc:
                entry["memory_unread"] = str(exc)
        else:
            entry["memory_unread"] = "no answer"
        entry.update(kv_lines(logs.get(node, [])))
        nodes[node] = entry
    under = sorted(n for n, e in nodes.items() if e.get("mem_available_gib", reserve_gib) < reserve_gib)
    return {"nodes": dict(sorted(nodes.items())), "reserve_gib": reserve_gib, "under_reserve": under}


def summary(after: dict) -> str:
    """One line per release for `history`: free memory per node and the KV-cache size."""
    parts = []
    for node, e in (after or {}).get("nodes", {}).items():
        bit = f"{node} {e['mem_available_gib']:.1f} GiB free" if "mem_available_gib" in e else f"{node} memory ?"
        if "swap_total_gib" in e and e["swap_total_gib"]:
            bit += f", swap {e['swap_total_gib'] - e['swap_free_gib']:.1f} used"
        if "kv_cache_tokens" in e:
            bit += f", KV {e['kv_cache_tokens']:,} tokens ({e['max_concurrency']:.2f}x)"
        parts.append(bit)
    return "; ".join(parts)
