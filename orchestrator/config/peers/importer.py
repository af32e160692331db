"""`recipe import`: which peer wrote the file (from its content, or as told), its name and image, the
peer's reader, then the recipe check (document.settle) and the commented text."""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass
from pathlib import Path

from ..hints import fixed
from ..source import ConfigError, ConfigIssue, read_document
from . import eugr, sparkrun
from .document import build, distinct, dump, settle
from .parts import Left, PeerFormat, Placed, Source
from .reading import Reading

EUGR_KEYS = {"recipe_version", "name", "description", "model", "container", "cluster_only", "solo_only",
             "build_args", "mods", "defaults", "env", "command"}
# sparkrun 0.4.2 core/recipe.py _KNOWN_KEYS (and RECIPES.md) without the keys eugr's format has too
SPARKRUN_ONLY = {"sparkrun_version", "min_sparkrun_version", "model_revision", "runtime", "runtime_version", "mode",
                 "min_nodes", "max_nodes", "containers", "runtime_config", "benchmark", "metadata", "pre_exec",
                 "post_exec", "post_commands", "stop_after_post", "builder", "builder_config", "executor",
                 "executor_config", "scheduler", "distribution_config", "layout", "cluster_config", "runtime_cache",
                 "readiness", "capabilities", "unsupported_capabilities", "include", "overrides"}
OURS = {"image", "vllm", "serve", "mounts", "expect", "secrets"}
READERS = {PeerFormat.SPARKRUN: sparkrun.read, PeerFormat.EUGR: eugr.read}
ENTRYPOINT = "both peers run `vllm serve` as the container's command"


@dataclass(frozen=True)
class Imported:
    """The recipe written, what went where, what was left out (and why), and the image still to pin."""

    format: PeerFormat
    detected_by: str
    text: str
    placed: list[Placed]
    left: list[Left]
    image_ref: str
    pin: str


def detect(data: dict) -> tuple[PeerFormat, str] | None:
    """The peer format the content says, and what says it; None when it is neither."""
    version = str(data.get("recipe_version", "")).strip()
    if version in ("1", "2"):
        return (PeerFormat.EUGR if version == "1" else PeerFormat.SPARKRUN), f'recipe_version: "{version}"'
    theirs = [k for k in data if k in SPARKRUN_ONLY]
    if theirs:
        return PeerFormat.SPARKRUN, f"sparkrun's key `{theirs[0]}`"
    if "{model}" in str(data.get("command", "")):
        return PeerFormat.SPARKRUN, "`{model}` in the command (sparkrun fills it)"
    if data.get("command") is not None and any(k in data for k in ("name", "build_args", "mods")):
        return PeerFormat.EUGR, "`name`/`build_args`/`mods` beside a `command` (eugr's recipe format)"
    if data.get("model") is not None and data.get("container") is not None:
        return PeerFormat.SPARKRUN, "`model` and `container` (sparkrun's minimal recipe)"
    return None


def recipe_name(text: str) -> str:
    """A recipe name (lower-case letters, digits, '.', '_', '-') from the peer's name or the file's."""
    name = re.sub(r"[^a-z0-9._-]+", "-", text.lower()).strip("-._")
    return (name or "imported")[:63].rstrip("-._")


def pin_line(output: str | None) -> str:
    return f"spark-deploy pin {shlex.quote(output) if output else 'RECIPE.yaml'}"


def import_recipe(path: str | Path, told: PeerFormat | None = None, output: str | None = None) -> Imported:
    """Read a peer's recipe file. Raises ConfigError (file:line, cause, fix) for a file that is not one, runs
    another engine than vLLM, or lacks what a recipe needs (the image)."""
    doc = read_document(path)
    data = doc.data()
    found = detect(data)
    if told is not None:
        found = (told, "--from")
    elif found is None:
        ours = sorted(OURS & set(data))
        cause = (f"already a spark-deploy recipe (`{ours[0]}:`)" if ours else
                 "neither a sparkrun recipe nor an eugr/spark-vllm-docker recipe")
        raise ConfigError([doc.issue((), fixed(cause, "`--from sparkrun|eugr` reads it as one of them" if not ours
                                               else "`spark-deploy validate` it as it is"))])
    fmt, why = found
    reading = Reading(doc)
    if data.get("container") is None:
        raise ConfigError([doc.issue((), fixed("no `container:`: the image the recipe runs is not named",
                                               "add `container: IMAGE` (the image you ran it with)"))])
    _head(reading, data, Path(path), output)
    READERS[fmt](reading, data)
    placed, repeated = distinct(reading.placed)
    placed, refused = settle(placed, output or f"{Path(path).stem} (imported)")
    left = sorted(reading.left + repeated + refused, key=lambda item: item.source.line or 0)
    if ("model", "repo") not in {p.target for p in placed}:
        raise ConfigError([ConfigIssue(str(path), None, "model", fixed("no model: neither `model:` nor the "
                                       "command names one", "add `model: ORG/NAME`"))])
    header = [f"Imported by `spark-deploy recipe import` from {path} ({fmt} recipe: {why}).",
              "Each value's comment names the key it came from." + (" Not written:" if left else "")]
    header += [f"  {item}" for item in left]
    return Imported(fmt, why, dump(build(placed, header)), placed, left, str(data["container"]), pin_line(output))


def _head(reading: Reading, data: dict, path: Path, output: str | None) -> None:
    """name, description and the image (left unpinned: `pin` reads its ID from a node)."""
    if data.get("name") is not None:
        reading.put(("name",), recipe_name(str(data["name"])), reading.source("name"))
    else:
        reading.put(("name",), recipe_name(path.stem), Source("the file's name", None))
    if data.get("description") is not None:
        reading.put(("description",), str(data["description"]), reading.source("description"))
    reading.put(("image", "ref"), str(data["container"]), reading.source("container"))
    reading.put(("image", "id"), None, Source("", None), f"unpinned: run `{pin_line(output)}`")
    reading.put(("image", "serve_entrypoint"), False, Source("", None), ENTRYPOINT)
