"""vLLM checks: the rendered flags against the pinned image's own parser, speculative tokens against the
model's n_predict, overlay mounts against the image and the nodes.

The image is asked, never guessed: on the head only, a throwaway container with no network and no GPU
(`docker run --rm --pull never --network none --entrypoint vllm IMAGE serve --help=all`, falling back to
`--help` for images older than vLLM 0.9 that refuse `=all`) prints the parser's flags.

Cache (by image ID, on the controller, under $XDG_CACHE_HOME or ~/.cache, `spark-deploy/vllm-help/` and
`spark-deploy/image-paths/`): an image ID names immutable content, so what its parser accepts and which
paths it holds never change. A fact's args function looks in the cache first: for a cached image it
passes the marker `@cached` and the script runs no container; the judge then reads the cache. A fresh
answer is written to the cache by the judge (the one side effect of these judges: a file on the
controller). Only pinned IDs (`sha256:...`) are cached: a tag can move.
"""

from __future__ import annotations

import difflib
import json
import os
from enum import StrEnum
from pathlib import Path
from typing import Any

from ..checks.model_cache import RESOLVE_SH
from ..config.load import Deployment
from ..render.plan import Plan, build_plan
from ..facts.core import FactInput, Observed, fact
from .help_parse import Layout, Options, canonical, layout, parse_help, parse_listed
from .table_agreement import disagreements
from ..checks.verdict import Cell, Scope, Status, Verdict, worst
from .registry import check, missing

Seen = dict[str, dict[str, Observed]]
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
    cached = read_cache("vllm-help", image)  # one without "listed" (an older spark-deploy's) is read again
    return [CACHED] if cached is not None and "listed" in cached else [image]


@fact("image_help", r'''[ $# -gt 0 ] || { echo '@peer'; exit 0; }
[ "$1" = '@cached' ] && { echo '@cached'; exit 0; }
run() { docker run --rm --pull never --network none --entrypoint vllm "$1" serve "$2" 2>&1; }
if out=$(run "$1" --help=all); then printf '@via --help=all\n%s\n' "$out"; exit 0; fi
first=$out
if out=$(run "$1" --help) && [ -n "$out" ]; then printf '@via --help\n%s\n' "$out"; exit 0; fi
printf '%s\n' "$first" >&2; exit 1''', args=_help_args)
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


def rendered_flags(plan: Plan) -> list[tuple[str, str | None]]:
    """Every (option token, its value or None) of every rank's `vllm serve` argv, in order, once each:
    the tokens after the image ID (after `vllm serve` when the image's entrypoint is not already it)."""
    seen: dict[tuple[str, str | None], None] = {}
    for launch in plan.ranks:
        argv = list(launch.argv)
        tokens = argv[argv.index(plan.image_id) + 1:]
        if not launch.spec.serve_entrypoint:
            tokens = tokens[2:]
        for i, tok in enumerate(tokens):
            if not tok.startswith("-") or tok == "-":
                continue
            flag, eq, value = tok.partition("=")
            if not eq:
                nxt = tokens[i + 1] if i + 1 < len(tokens) else None
                value = nxt if nxt is not None and not nxt.startswith("-") else None
            seen[(flag, value)] = None
    return list(seen)


def judge_flags(flags: list[tuple[str, str | None]], options: Options) -> tuple[list[str], list[str]]:
    """Pure: (failures, warnings), each naming the flag and the closest real option strings."""
    fails, warns = [], []
    for flag, value in flags:
        name = canonical(flag, options)
        if name not in options:
            close = difflib.get_close_matches(name, list(options), n=3, cutoff=0.6)
            fails.append(f"unknown flag {flag}" + (f" (closest: {', '.join(close)})" if close else ""))
            continue
        choices = options[name]
        if choices is None or value is None or value in choices:
            continue
        norm = value.lower().replace("-", "_")
        if norm in choices:
            warns.append(f"{flag} {value!r} is accepted only if the option normalises case and dashes "
                         f"(vLLM's backend flags do): write {norm!r}")
            continue
        close = difflib.get_close_matches(norm, list(choices), n=3, cutoff=0.5)
        fails.append(f"{flag}: invalid choice {value!r}" + (f" (closest: {', '.join(close)})" if close else "")
                     + f"; choices: {', '.join(choices)}")
    return fails, warns


def _head_cell(seen: Seen, dep: Deployment, fact_name: str) -> tuple[str, Cell | None]:
    """The head's name and a skip cell when its fact could not be read (None: judge it)."""
    head = dep.inventory.head
    if head not in seen:
        return head, None
    broken = missing({head: seen[head]}, (fact_name,))
    return head, broken.get(head)


_NOT_THERE = ("No such image", "Unable to find image", "pull access denied")


def _image_failure(error: str, image: str) -> Cell:
    if any(s in error for s in _NOT_THERE):
        return Cell(Status.SKIP, f"image {image[:19]} is not on the head yet (synced by `up`): {error}")
    return Cell(Status.FAIL, f"running the image failed: {error}")


@check("vllm-flags", ("image_help",), Scope.HEAD, field_note=5)
def vllm_flags(seen: Seen, dep: Deployment) -> Verdict:
    plan = build_plan(dep)
    head, broken = _head_cell(seen, dep, "image_help")
    if head not in seen:
        return Verdict("vllm-flags", Scope.HEAD, {}, "", 5)
    if broken is not None:
        cell = _image_failure(seen[head]["image_help"].error or "", plan.image_id)
        return Verdict("vllm-flags", Scope.HEAD, {head: cell}, "" if cell.status is Status.SKIP else
                       "the image's `vllm serve --help=all` must work offline: check the image", 5)
    got = seen[head]["image_help"].value
    if got["source"] is Source.CACHED:
        cached = read_cache("vllm-help", plan.image_id)
        if cached is None:
            return Verdict("vllm-flags", Scope.HEAD, {head: Cell(
                Status.SKIP, "the cached parser vanished between gathering and judging: run again")}, "", 5)
        options = {k: tuple(v) if v is not None else None for k, v in cached["options"].items()}
        via = f"{cached['via']}, cached"
    else:
        options, via = got["options"], got["via"]
        write_cache("vllm-help", plan.image_id,  # config/flag_table.py reads it for validate, render and up
                    {"via": via, "options": {k: list(v) if v else None for k, v in options.items()},
                     "listed": {k: list(v) for k, v in got["listed"].items()}})
    flags = rendered_flags(plan)
    fails, warns = judge_flags(flags, options)
    notes = disagreements(dep.recipe, options)  # why `validate` (the shipped table) answered otherwise
    if fails:
        return Verdict("vllm-flags", Scope.HEAD, {head: Cell(Status.FAIL, "; ".join(fails + notes))},
                       "vLLM would exit 2 after start-up (field note 5): " + "; ".join(fails + notes), 5)
    warns += notes
    if warns:
        return Verdict("vllm-flags", Scope.HEAD, {head: Cell(Status.WARN, "; ".join(warns))}, "; ".join(warns), 5)
    return Verdict("vllm-flags", Scope.HEAD, {head: Cell(
        Status.OK, f"{len(flags)} flags known to the image's parser ({len(options)} options, {via})")}, "", 5)


# --- speculative tokens against the model's n_predict ------------------------------------------------

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


@check("speculative-tokens", ("spec_model_config",), Scope.NODE)
def speculative_tokens(seen: Seen, dep: Deployment) -> Verdict:
    spec = dep.recipe.vllm.speculative_config
    if spec is None:
        return Verdict("speculative-tokens", Scope.NODE,
                       {n: Cell(Status.SKIP, "no vllm.speculative_config") for n in seen})
    k = spec.num_speculative_tokens
    cells = missing(seen, ("spec_model_config",))
    bad = {}
    for node, facts in seen.items():
        if node in cells:
            continue
        cfg = facts["spec_model_config"].value or {}
        n = cfg.get("n_predict") or cfg.get("num_nextn_predict_layers")  # vLLM's own order
        if spec.method == "dspark":  # vLLM 0.33.0 (config/speculative.py) checks n_predict for no dspark
            cells[node] = Cell(Status.OK, f"num_speculative_tokens={k}; dspark drafts its own width (no "
                                          "n_predict rule)")
        elif not n:
            cells[node] = Cell(Status.OK, f"num_speculative_tokens={k}; the model sets no n_predict")
        elif k > n and k % n:  # vLLM's rule: fewer than n_predict is fine (MTP module reuse needs multiples)
            cells[node] = Cell(Status.FAIL, f"num_speculative_tokens={k} is not divisible by n_predict={n}")
            bad[node] = n
        else:
            cells[node] = Cell(Status.OK, f"num_speculative_tokens={k}, n_predict={n}")
    fix = ""
    if bad:
        n = next(iter(bad.values()))
        fix = (f"rule spec-tokens-divisible-by-n-predict: vLLM refuses to start (\"num_speculative_tokens:{k} "
               f"must be divisible by n_predict={n}\"): set vllm.speculative_config.num_speculative_tokens to "
               f"{n} or {2 * n}")
    return Verdict("speculative-tokens", Scope.NODE, cells, fix)


# --- overlay mounts: targets in the image, sources on every node -------------------------------------

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


@check("overlay-targets", ("overlay_targets", "overlay_sources"), Scope.NODE, field_note=7)
def overlay_targets(seen: Seen, dep: Deployment) -> Verdict:
    overlays = dep.recipe.mounts.overlays
    if not overlays:
        return Verdict("overlay-targets", Scope.NODE, {n: Cell(Status.SKIP, "the recipe has no mounts.overlays")
                                                       for n in seen}, "", 7)
    image, head = dep.recipe.image.id or dep.recipe.image.ref, dep.inventory.head
    cells, problems = missing(seen, ("overlay_sources",)), []
    for node, facts in seen.items():
        if node in cells:
            continue
        gone = [s for s, ok in facts["overlay_sources"].value.items() if not ok]
        cells[node] = (Cell(Status.FAIL, "source missing: " + ", ".join(gone)) if gone else
                       Cell(Status.OK, f"{len(overlays)} overlay source(s) present"))
        problems += [f"{s} missing on {node}" for s in gone]
    if head in seen:
        target = _judge_targets(seen[head], image, [m.target for m in overlays], problems)
        source = cells.get(head)
        cells[head] = target if source is None else Cell(
            worst(source.status, target.status), f"{source.value}; {target.value}")
    fix = ("an overlay whose target the image no longer has, or whose source is absent, silently stops "
           "applying (field note 7): " + "; ".join(problems)) if problems else ""
    return Verdict("overlay-targets", Scope.NODE, cells, fix, 7)


def _judge_targets(facts: dict[str, Observed], image: str, targets: list[str], problems: list[str]) -> Cell:
    observed = facts.get("overlay_targets")
    if observed is None or not observed.ok:
        why = observed.error if observed else "not gathered"
        return _image_failure(why or "", image)
    got = observed.value
    known = dict((read_cache("image-paths", image) or {}).get("paths", {}))
    if got["source"] is Source.FRESH:
        known.update(got["paths"])
        write_cache("image-paths", image, {"paths": known})
    absent = [t for t in targets if t not in known]
    if absent:
        return Cell(Status.SKIP, "not known (the cache vanished between gathering and judging): run again")
    gone = [t for t in targets if not known[t]]
    problems += [f"target {t} not in the image" for t in gone]
    if gone:
        return Cell(Status.FAIL, "target missing in the image: " + ", ".join(gone))
    cached = ", cached" if got["source"] is Source.CACHED else ""
    return Cell(Status.OK, f"{len(targets)} overlay target(s) in the image{cached}")
