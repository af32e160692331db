"""vLLM checks: the rendered flags against the pinned image's own parser, speculative tokens against the
model's n_predict, overlay mounts against the image and the nodes. The facts they judge (the image's
`--help`, the controller's cache of it, the config's n_predict, the overlay paths) are in facts/vllm.py.

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

from ..checks.flags import judge_flags, rendered_flags
from ..config.load import Deployment
from ..render.plan import build_plan
from ..facts.core import Observed
from ..facts.vllm import Source, cache_help, read_cache, write_cache
from .table_agreement import disagreements
from ..checks.verdict import Cell, Scope, Status, Verdict, worst
from .registry import check, missing

Seen = dict[str, dict[str, Observed]]

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
        cache_help(plan.image_id, got)  # config/flag_table.py reads it for validate, render and up
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
