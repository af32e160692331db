"""The pinned image's facts (read on the head) and the speculative model's config: the image's own `vllm serve`
parser, which overlay targets the image holds, whether each overlay source is on a node, and n_predict.

The image is asked, never guessed: on the head only, a throwaway container with no network and no GPU
(`docker run --rm --pull never --network none --entrypoint vllm IMAGE serve --help=all`, falling back to
`--help` for images older than vLLM 0.9 that refuse `=all`) prints the parser's flags.

Cache (by image ID, on the controller, under $XDG_CACHE_HOME or ~/.cache, `spark-deploy/vllm-help/` and
`spark-deploy/image-paths/`): an image ID names immutable content, so what its parser accepts and which
paths it holds never change. A fact's args function looks in the cache first: for a cached image it
passes the marker `@cached` and the script runs no container; the judge then reads the cache. A fresh
answer is written to the cache by the judge (preflight's checks_vllm.py: the one side effect of its judges, a
file on the controller). Only pinned IDs (`sha256:...`) are cached: a tag can move.
"""

from __future__ import annotations

import json
import os
from enum import StrEnum
from pathlib import Path
from typing import Any

from ..checks.help_parse import Layout, layout, parse_help, parse_listed
from ..checks.model_cache import RESOLVE_SH
from .core import FactInput, fact

CACHED = "@cached"  # the args marker: the controller already knows this image's answer


class Source(StrEnum):
    PEER = "not the head"  # the fact did nothing on this node
    CACHED = "cached"
    FRESH = "fresh"
    NONE = "nothing to check"


# --- the cache on the controller ---------------------------------------------------------------------

def cache_root() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spark-deploy"


def _pinned(image_id: str) -> bool:
    return image_id.startswith("sha256:")


def cache_file(kind: str, image_id: str) -> Path:
    return cache_root() / kind / (image_id.replace(":", "-") + ".json")


def read_cache(kind: str, image_id: str) -> dict | None:
    if not _pinned(image_id):
        return None
    try:
        data = json.loads(cache_file(kind, image_id).read_text())
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) and data.get("image") == image_id else None


def write_cache(kind: str, image_id: str, data: dict) -> None:
    """Atomic (write, then rename): a second preflight never reads half a file."""
    if not _pinned(image_id):
        return
    path = cache_file(kind, image_id)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(f".{os.getpid()}.tmp")
    tmp.write_text(json.dumps({**data, "image": image_id}, sort_keys=True))
    tmp.replace(path)


def _on_head(given: FactInput) -> bool:
    return given.node.name == given.dep.inventory.head


# --- image_help: the image's own parser ---------------------------------------------------------------

def _help_args(given: FactInput) -> list[str]:
    if not _on_head(given):
        return []
    image = given.plan.image_id
    return [CACHED] if help_cached(image) else [image]  # one without "listed" (an older spark-deploy's): again


HELP_SCRIPT = r'''[ $# -gt 0 ] || { echo '@peer'; exit 0; }
[ "$1" = '@cached' ] && { echo '@cached'; exit 0; }
run() { docker run --rm --pull never --network none --entrypoint vllm "$1" serve "$2" 2>&1; }
if out=$(run "$1" --help=all); then printf '@via --help=all\n%s\n' "$out"; exit 0; fi
first=$out
if out=$(run "$1" --help) && [ -n "$out" ]; then printf '@via --help\n%s\n' "$out"; exit 0; fi
printf '%s\n' "$first" >&2; exit 1'''  # also `pin`'s read of the image it pins (deploy/pin.py)


@fact("image_help", HELP_SCRIPT, args=_help_args)
def parse_image_help(stdout: str) -> dict[str, Any]:
    """-> {"source": Source, "via": the help flag, "options": {option: choices | None}}."""
    head, _, body = stdout.partition("\n")
    if head.strip() == "@peer":
        return {"source": Source.PEER}
    if head.strip() == CACHED:
        return {"source": Source.CACHED}
    if not head.startswith("@via "):
        raise ValueError(f"no @via header: {head[:80]!r}")
    via = head[len("@via "):].strip()
    kind = layout(body)
    if kind is Layout.GROUPS:
        raise ValueError(f"`vllm serve {via}` printed only the list of config groups, no flags")
    return {"source": Source.FRESH, "via": via, "options": parse_help(body), "listed": parse_listed(body)}


def help_cached(image_id: str) -> bool:
    """The image's parser is cached with its listed values (one cached by an older spark-deploy is not)."""
    cached = read_cache("vllm-help", image_id)
    return cached is not None and "listed" in cached


def cache_help(image_id: str, got: dict[str, Any]) -> Path:
    """A fresh `image_help` answer cached by image ID (config/flag_table.py reads it for validate, render,
    up and the typed recipe fields): preflight's vllm-flags and `pin` both write it so."""
    write_cache("vllm-help", image_id,
                {"via": got["via"], "options": {k: list(v) if v else None for k, v in got["options"].items()},
                 "listed": {k: list(v) for k, v in got["listed"].items()}})
    return cache_file("vllm-help", image_id)


def _spec_args(given: FactInput) -> list[str]:
    """The model whose config sets n_predict: speculative_config.model (a draft, at `main`) when given,
    else the target model at the recipe's revision."""
    spec = given.dep.recipe.vllm.speculative_config
    if spec is None:
        return []
    draft = (spec.model_extra or {}).get("model")
    repo, rev = (str(draft), "main") if draft else (given.dep.recipe.model.repo, given.dep.recipe.model.revision)
    return [given.node.hf_cache, repo, rev]


@fact("spec_model_config", r'''[ $# -eq 3 ] || { echo '@none'; exit 0; }
cache=$1; repo=$2; rev=$3
''' + RESOLVE_SH + r'''
cat -- "$root/snapshots/${commit:-$rev}/config.json"''', args=_spec_args)
def parse_spec_model_config(stdout: str) -> dict[str, int | None] | None:
    """config.json -> its n_predict / num_nextn_predict_layers (None: no speculative config to check)."""
    if stdout.strip() == "@none":
        return None
    cfg = json.loads(stdout)
    if not isinstance(cfg, dict):
        raise TypeError("config.json is not an object")
    return {k: cfg.get(k) for k in ("n_predict", "num_nextn_predict_layers")}



_EXISTS = r'''for p; do if [ -e "$p" ]; then echo "yes $p"; else echo "no $p"; fi; done'''


def _targets_args(given: FactInput) -> list[str]:
    targets = [m.target for m in given.dep.recipe.mounts.overlays]
    if not _on_head(given) or not targets:
        return []
    image = given.plan.image_id
    known = (read_cache("image-paths", image) or {}).get("paths", {})
    todo = [t for t in targets if t not in known]
    return [image, *todo] if todo else [CACHED]


def _parse_exists(lines: str) -> dict[str, bool]:
    out = {}
    for line in lines.splitlines():
        if line.strip():
            word, _, path = line.partition(" ")
            if word not in ("yes", "no") or not path:
                raise ValueError(f"unexpected line {line[:80]!r}")
            out[path] = word == "yes"
    return out


@fact("overlay_targets", r'''[ $# -gt 0 ] || { echo '@none'; exit 0; }
[ "$1" = '@cached' ] && { echo '@cached'; exit 0; }
img=$1; shift
echo '@fresh'
docker run --rm --pull never --network none --entrypoint sh "$img" -c ''' + "'" + _EXISTS + "'" + ''' sh "$@"''',
      args=_targets_args)
def parse_overlay_targets(stdout: str) -> dict[str, Any]:
    """-> {"source": Source, "paths": {target: exists in the image}}."""
    head, _, body = stdout.partition("\n")
    tag = head.strip()
    if tag == "@none":
        return {"source": Source.NONE, "paths": {}}
    if tag == CACHED:
        return {"source": Source.CACHED, "paths": {}}
    if tag != "@fresh":
        raise ValueError(f"unexpected header {tag[:80]!r}")
    return {"source": Source.FRESH, "paths": _parse_exists(body)}


@fact("overlay_sources", _EXISTS, args=lambda given: [m.source for m in given.dep.recipe.mounts.overlays])
def parse_overlay_sources(stdout: str) -> dict[str, bool]:
    """-> {source path: exists on this node}."""
    return _parse_exists(stdout)

