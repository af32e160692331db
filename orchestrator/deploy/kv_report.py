"""Predicted against logged KV cache: what model-fit said before the load, what the engine says after it.

The engine prints `GPU KV cache size: N tokens` and `Maximum concurrency for L tokens per request: X.XXx`
(one line or two, by version) from EngineCore on the head. vLLM sizes every rank's cache alike (the
smallest wins), so the prediction compared is the smallest node's. Recorded with the release: a
prediction far from the engine's figure is a reason to distrust the next preflight for this model.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..checks.kv_layout import UnknownLayout
from ..checks.model_fit import FitError
from ..facts.fit import predict

SIZE = re.compile(r"GPU KV cache size: ([\d,]+) tokens")
CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")


@dataclass(frozen=True)
class Logged:
    tokens: int
    max_model_len: int | None = None
    concurrency: float | None = None


def parse_logged(lines: list[str]) -> Logged | None:
    """The last KV-cache size the log states (a restarted engine states it again), with its concurrency."""
    tokens = concurrency = length = None
    for line in lines:
        if m := SIZE.search(line):
            tokens, concurrency, length = int(m.group(1).replace(",", "")), None, None
        if (m := CONCURRENCY.search(line)) and tokens is not None:
            length, concurrency = int(m.group(1).replace(",", "")), float(m.group(2))
    return None if tokens is None else Logged(tokens, length, concurrency)


def record(facts: dict, dep, head_lines: list[str]) -> dict | None:
    """The release's kv_cache entry: predicted (per node and the smallest), logged, and their ratio.
    None when there is neither (no facts gathered and no line logged)."""
    out: dict = {}
    try:
        fits = predict(facts, dep) if facts else {}
    except (FitError, UnknownLayout) as exc:
        out["predicted_error"] = str(exc)
        fits = {}
    if fits:
        smallest = min(fits.values(), key=lambda f: f.tokens)
        out.update(predicted=smallest.tokens, predicted_per_node={n: f.tokens for n, f in fits.items()},
                   kv_bytes_per_token=smallest.kv.bytes_per_token, weights_per_rank=smallest.weights,
                   max_model_len=smallest.max_model_len)
    logged = parse_logged(head_lines)
    if logged is not None:
        out.update(logged=logged.tokens, logged_concurrency=logged.concurrency)
        if logged.max_model_len:
            out["max_model_len"] = logged.max_model_len
    if out.get("predicted") and out.get("logged") is not None:
        out["ratio"] = round(out["logged"] / out["predicted"], 4)
    return out or None


def text(kv: dict | None) -> str:
    """`predicted 706,256 / logged 698,112 (0.99x)`, or what is missing."""
    if not kv:
        return ""
    if kv.get("predicted") is None and kv.get("predicted_error"):
        return f"not predicted ({kv['predicted_error']})" + (f"; logged {kv['logged']:,}" if kv.get("logged") else "")
    predicted = f"{kv['predicted']:,}" if kv.get("predicted") is not None else "?"
    logged = f"{kv['logged']:,}" if kv.get("logged") is not None else "not logged"
    ratio = f" ({kv['ratio']:.2f}x)" if kv.get("ratio") is not None else ""
    return f"predicted {predicted} / logged {logged}{ratio}"
