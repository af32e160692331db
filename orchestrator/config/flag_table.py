"""The vLLM option table a recipe is judged against: the pinned image's own parser when preflight has
cached it, else the table shipped with spark-deploy (vLLM 0.33.0, orchestrator/vllm_table/).

`validate`, `render`, `up` and the typed recipe fields (`vllm.kv_cache_dtype`, `vllm.moe_backend`, ...)
all ask this one table, so they give one answer, and none of them keeps a list of its own: what vLLM's
parser accepts is vLLM's data. An image ID names immutable content, so its parser's answer, cached by
`pin` and preflight's `vllm-flags` check under $XDG_CACHE_HOME (else ~/.cache)/spark-deploy/vllm-help/, never goes
stale; a tag can move, so only a pinned `sha256:` ID is looked up. `pin` writes the same cache when it
pins (deploy/pin.py).

Accepted values of an option are the choices argparse enforces (`{a,b}` in the help) and the values a
list-shaped metavar names (`['auto', 'fp8', ...]`: --kv-cache-dtype), which argparse passes through and
vLLM's config class refuses when the engine is built.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from ..vllm_table import options_table as _bundled

REFRESH = ("`spark-deploy pin RECIPE` (or `spark-deploy preflight RECIPE --only vllm-flags`) reads the pinned "
           "image's own parser and caches it by image ID; validate, render and up then check against it")


def help_cache_file(image_id: str) -> Path:
    """Where `pin` and preflight's vllm-flags check cache an image's parser (facts/vllm.cache_file)."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spark-deploy" / "vllm-help" / (image_id.replace(":", "-") + ".json")


@dataclass(frozen=True)
class FlagTable:
    """Which `vllm serve` options exist and the values of those that take a closed set."""

    source: str  # names the table in messages
    names: frozenset[str]  # every option string accepted, dashes included (aliases, hidden --no- forms)
    values: dict[str, tuple] = field(default_factory=dict)  # option string -> accepted values
    image: str | None = None  # the image ID whose parser this is (None: the shipped table)

    def knows(self, flag: str) -> bool:
        return f"--{flag}" in self.names

    def accepted(self, flag: str) -> tuple | None:
        return self.values.get(f"--{flag}")

    def long_names(self) -> list[str]:
        return sorted(n[2:] for n in self.names if n.startswith("--"))


def _bundled_table() -> FlagTable:
    names: set[str] = set()
    values: dict[str, tuple] = {}
    for strings, hidden, _dest, _group, _action, _type, choices, _nargs, _default, metavar in _bundled.OPTIONS:
        accepted = tuple(choices) if choices else tuple(metavar) if isinstance(metavar, tuple) else None
        for s in tuple(strings) + tuple(hidden):
            names.add(s)
            if accepted:
                values[s] = accepted
    return FlagTable(f"vLLM {_bundled.VERSION}'s option table shipped with spark-deploy (the image's own parser "
                     "is not cached yet)", frozenset(names), values)


BUNDLED = _bundled_table()


def image_table(image_id: str | None) -> FlagTable | None:
    """The cached parser of a pinned image, or None (not pinned, never read, or cached by an older
    spark-deploy that did not keep the listed values)."""
    if not image_id or not image_id.startswith("sha256:"):
        return None
    path = help_cache_file(image_id)
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    if not isinstance(data, dict) or data.get("image") != image_id or not isinstance(data.get("listed"), dict):
        return None
    options, listed = data.get("options"), data["listed"]
    if not isinstance(options, dict):
        return None
    values = {k: tuple(v) for k, v in options.items() if v}
    values.update({k: tuple(v) for k, v in listed.items() if v})
    return FlagTable(f"the image {image_id[:19]}'s own parser (cached in {path})",
                     frozenset(options), values, image_id)


def table_for(image_id: str | None) -> FlagTable:
    """The image's table when cached, else the shipped one."""
    return image_table(image_id) or BUNDLED
