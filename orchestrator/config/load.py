"""Load recipe and inventory files into validated models; every problem names file, line and key."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Sequence

from pydantic import ValidationError

from .hints import closest, example_of, fixed, keys_at, pattern_message, type_hint, yaml_line
from .inventory import Inventory, inventory_problems
from .overrides import apply_overrides, effective_text, parse_overrides
from .recipe import Recipe, recipe_problems
from .source import ConfigError, ConfigIssue, Document, parse_document, read_document
from .vllm_flags import flag_issues

_MESSAGES = {
    "extra_forbidden": "unknown key",
    "missing": "required key is missing",
}
_BOUNDS = {"greater_than": ("gt", 1), "greater_than_equal": ("ge", 0), "less_than": ("lt", -1),
           "less_than_equal": ("le", 0)}


def _clean_loc(loc: tuple) -> tuple:
    """Drop pydantic's internal loc parts (union branches, validator names) that are not YAML keys."""
    return tuple(p for p in loc if isinstance(p, int) or not any(c in str(p) for c in "[]()"))


def _key(loc: tuple) -> str:
    """The key a fix writes: the last name in `loc` (a list item's is its list's)."""
    return next((str(p) for p in reversed(loc) if not isinstance(p, int)), "value")


def _bound_fix(err: dict, key: str) -> str:
    """The nearest value inside a numeric bound, as the line to write."""
    name, step = _BOUNDS[err["type"]]
    bound = err.get("ctx", {}).get(name)
    if isinstance(bound, int) and isinstance(err.get("input"), int):
        return f"write {yaml_line(key, bound + step)} or {'more' if step >= 0 and name[0] == 'g' else 'less'}"
    side = {"gt": "above", "ge": "at least", "lt": "below", "le": "at most"}[name]
    return f"write a number {side} {bound}"


def _message(err: dict, loc: tuple, model: type, override: str | None = None) -> str:
    """pydantic's words, plus the fix: the key meant, or the value read and the forms accepted. An unknown
    key given as `--set KEY=VALUE` (`override`) gets the same key meant, written as the --set to give."""
    key, value = _key(loc), err.get("input")
    if err["type"] == "extra_forbidden":
        known = keys_at(model, loc[:-1])
        meant = closest(loc[-1], known)
        if meant and override is not None:
            return fixed("unknown key", f"did you mean --set {'.'.join(map(str, loc[:-1] + (meant,)))}=...?")
        if meant:
            return fixed("unknown key", f"did you mean {yaml_line(meant, value)}?")
        return fixed("unknown key", f"remove it, or use a key accepted here: {', '.join(known)}" if known else "remove it")
    if err["type"] == "string_pattern_mismatch":
        return pattern_message(value, err["ctx"]["pattern"], key)
    message = _MESSAGES.get(err["type"], err["msg"].removeprefix("Value error, "))
    if err["type"] == "extra_value_type":
        return fixed(f"a vLLM flag's value: read {value!r}", "write true/false, a number or text, or for a JSON option "
                     "a mapping (compilation-config: {mode: 3})")
    if err["type"] == "missing":
        example = example_of(model, loc)
        return fixed(message, f"add {yaml_line(key, example) if example is not None else f'`{key}:`'} here "
                              "(`spark-deploy schema recipe|inventory` lists every key)")
    if err["type"] in _BOUNDS:
        return fixed(f"{message}; read {value!r}", _bound_fix(err, key))
    if err["type"] in ("too_short", "too_long"):
        bound = err.get("ctx", {}).get("min_length" if err["type"] == "too_short" else "max_length")
        return fixed(message, f"list {'at least' if err['type'] == 'too_short' else 'at most'} {bound} below `{key}:`")
    if err["type"] == "literal_error":
        expected = _expected(err)
        meant = closest(value, expected)
        fix = f"did you mean {yaml_line(key, meant)}?" if meant else f"write one of them, e.g. {yaml_line(key, expected[0])}"
        return fixed(f"{message}; read {value!r}", fix)
    return message + type_hint(err, key, example_of(model, loc))


def _expected(err: dict) -> list[str]:
    return [part.strip(" '") for part in err.get("ctx", {}).get("expected", "").replace(" or ", ",").split(",")]


def _issues_from(exc: ValidationError, doc: Document, model: type) -> list[ConfigIssue]:
    issues, seen, typed = [], set(), set()
    for err in exc.errors(include_url=False):
        loc = _clean_loc(err["loc"])
        if loc[:2] == ("vllm", "extra") and len(loc) > 3 and err["type"].endswith("_type"):
            loc = loc[:3]  # the union's branch names (bool, int, ...) are not keys of the file
            err = {**err, "type": "extra_value_type"}
        if err["type"].endswith("_type"):  # a union's branches each say "should be a valid X": one line
            if loc in typed:
                continue
            typed.add(loc)
        message = _message(err, loc, model, doc.override_at(loc))
        if (loc, message) in seen:
            continue
        seen.add((loc, message))
        issues.append(doc.issue(loc, message))
    return issues


def load_model(path: str | Path, model: type, problems: Callable[[Any], list[tuple[tuple, str]]],
               overrides: Sequence[str] = ()):
    """Parse, apply the `--set KEY=VALUE` overrides, validate against `model`, then run the cross-field
    `problems` check; all as file:line issues (an override's as `--set KEY`)."""
    doc = read_document(path)
    if overrides:
        doc = apply_overrides(doc, parse_overrides(overrides))
    try:
        value = model.model_validate(doc.data())
    except ValidationError as exc:
        raise ConfigError(_issues_from(exc, doc, model)) from None
    found = problems(value)
    if found:
        raise ConfigError([doc.issue(loc, msg) for loc, msg in found])
    return value, doc


def load_inventory(path: str | Path) -> tuple[Inventory, Document]:
    return load_model(path, Inventory, inventory_problems)


def load_recipe(path: str | Path, overrides: Sequence[str] = ()) -> tuple[Recipe, Document]:
    return load_model(path, Recipe, recipe_problems, overrides)


@dataclass(frozen=True)
class Deployment:
    """A recipe bound to the inventory it runs on: the unit every command works with."""

    recipe: Recipe
    inventory: Inventory
    recipe_path: str
    inventory_path: str
    # The parsed files, so checks made later (config/local_checks.py) still name file:line.
    recipe_doc: Document | None = field(default=None, compare=False, repr=False)
    inventory_doc: Document | None = field(default=None, compare=False, repr=False)
    recipe_text: str | None = field(default=None, compare=False, repr=False)  # a recorded recipe: no file
    overrides: tuple[str, ...] = ()  # the `--set KEY=VALUE`s applied to the file (recipe_text: the result)

    def text(self) -> str:
        """The recipe's text as deployed: the recorded text, the file's with its overrides, or the file's."""
        return self.recipe_text if self.recipe_text is not None else Path(self.recipe_path).read_text()


def pair_problems(recipe: Recipe, rdoc: Document, inventory: Inventory, idoc: Document) -> list[ConfigIssue]:
    """Checks that need both files: parallel sizes vs GPUs, ports, node names in expectations."""
    issues: list[ConfigIssue] = []
    v = recipe.vllm
    world = v.tensor_parallel_size * v.pipeline_parallel_size
    if world != inventory.gpu_count:
        gpus, pp = inventory.gpu_count, v.pipeline_parallel_size
        fix = (f"write `tensor_parallel_size: {gpus // pp}`" if gpus % pp == 0 else
               f"write `tensor_parallel_size: {gpus}` and `pipeline_parallel_size: 1`") + ", or use an inventory with that many GPUs"
        issues.append(rdoc.issue(("vllm", "tensor_parallel_size"), fixed(
            f"tensor_parallel_size x pipeline_parallel_size = {world}, but {idoc.path} offers "
            f"{inventory.gpu_count} GPU(s) on {len(inventory.nodes)} node(s)", fix)))
    if v.master_port == recipe.serve.port:
        other = 29501 if recipe.serve.port != 29501 else 29502
        issues.append(rdoc.issue(("vllm", "master_port"), fixed(f"master port {v.master_port} is also the serve port",
                                                                f"write another port, e.g. `master_port: {other}`")))
    if len(inventory.nodes) > 1 and v.distributed_executor_backend not in ("mp", "uni", "external_launcher"):
        issues.append(rdoc.issue(("vllm", "distributed_executor_backend"), fixed(
            f"{v.distributed_executor_backend!r} across {len(inventory.nodes)} nodes: vLLM refuses it (\"nnodes > 1 "
            "can only be set when distributed executor backend is mp, uni or external_launcher.\")",
            "write `distributed_executor_backend: mp`")))
    elif len(inventory.nodes) > 1 and v.distributed_executor_backend == "uni":
        issues.append(rdoc.issue(("vllm", "distributed_executor_backend"),
                                 fixed("more than one node needs backend mp", "write `distributed_executor_backend: mp`")))
    names = {n.name for n in inventory.nodes}
    for i, line in enumerate(recipe.expect.lines):
        if line.nodes != "all":
            for j, node in enumerate(line.nodes):
                if node not in names:
                    meant = closest(node, sorted(names))
                    issues.append(rdoc.issue(("expect", "lines", i, "nodes", j), fixed(
                        f"node {node!r} is not in {idoc.path} (nodes: {', '.join(sorted(names))})",
                        f"did you mean {meant}?" if meant else "name one of those nodes, or write `nodes: all`")))
    targets = [recipe.mounts.hf_cache, recipe.mounts.jit_cache]  # a later mount on a taken path is the one named
    for i, mount in enumerate(recipe.mounts.overlays + recipe.mounts.extra):
        taken = mount.target in targets
        targets.append(mount.target)
        if taken:
            section = "overlays" if i < len(recipe.mounts.overlays) else "extra"
            index = i if section == "overlays" else i - len(recipe.mounts.overlays)
            issues.append(rdoc.issue(("mounts", section, index, "target"), fixed(
                f"{mount.target} is mounted twice", "give this mount a target of its own, or delete one of the two")))
    if recipe.mounts.hf_cache == recipe.mounts.jit_cache:
        issues.append(rdoc.issue(("mounts", "jit_cache"), fixed("the JIT cache must not be the HF cache mount (field note 2)",
                                                                f"write a path of its own: `jit_cache: {'/jitcache' if recipe.mounts.hf_cache != '/jitcache' else '/cache/vllm-jit'}`")))
    return issues


def load_deployment(recipe_path: str | Path, inventory_path: str | Path,
                    overrides: Sequence[str] = ()) -> Deployment:
    """Both files, validated alone and together, the recipe with its `--set` overrides applied. Raises
    ConfigError listing every issue."""
    issues: list[ConfigIssue] = []
    recipe = inventory = rdoc = idoc = None
    try:
        recipe, rdoc = load_recipe(recipe_path, overrides)
    except ConfigError as exc:
        issues += exc.issues
    try:
        inventory, idoc = load_inventory(inventory_path)
    except ConfigError as exc:
        issues += exc.issues
    if recipe is not None and inventory is not None:
        issues += pair_problems(recipe, rdoc, inventory, idoc)
    if issues:
        raise ConfigError(issues)
    return Deployment(recipe, inventory, str(recipe_path), str(inventory_path), rdoc, idoc,
                      recipe_text=effective_text(rdoc) if overrides else None, overrides=tuple(overrides))


def load_recipe_on(recipe_path: str | Path, bound: Deployment, overrides: Sequence[str] = ()) -> Deployment:
    """A second recipe on the inventory `bound` was loaded with (`bench --compare A B`): parsed once."""
    recipe, rdoc = load_recipe(recipe_path, overrides)
    issues = pair_problems(recipe, rdoc, bound.inventory, bound.inventory_doc or Document(bound.inventory_path, None))
    if issues:
        raise ConfigError(issues)
    return Deployment(recipe, bound.inventory, str(recipe_path), bound.inventory_path, rdoc, bound.inventory_doc,
                      recipe_text=effective_text(rdoc) if overrides else None, overrides=tuple(overrides))


def bind_recipe_text(text: str, name: str, inventory: Inventory, inventory_path: str | Path,
                     inventory_doc: Document | None = None) -> Deployment:
    """A recipe kept as text (a release record), bound to an inventory already parsed: no file written, the
    inventory not read again. Errors cite `name` and the line."""
    rdoc = parse_document(text, name)
    try:
        recipe = Recipe.model_validate(rdoc.data())
    except ValidationError as exc:
        raise ConfigError(_issues_from(exc, rdoc, Recipe)) from None
    issues = [rdoc.issue(loc, msg) for loc, msg in recipe_problems(recipe)]
    if not issues:
        issues = pair_problems(recipe, rdoc, inventory, inventory_doc or Document(str(inventory_path), None))
    if issues:
        raise ConfigError(issues)
    return Deployment(recipe, inventory, name, str(inventory_path), rdoc, inventory_doc, recipe_text=text)


def load_kept_recipe(text: str, folder: str, filename: str, inventory_path: str | Path) -> Deployment:
    """A recipe kept as text (a release record, a maintenance baseline), bound to today's inventory. The
    text is written to `folder` under this machine's temp dir first, so file:line errors name a copy the
    operator can open."""
    import tempfile

    cache = Path(tempfile.gettempdir()) / folder
    cache.mkdir(parents=True, exist_ok=True)
    path = cache / filename
    path.write_text(text)
    return load_deployment(path, inventory_path)


def recipe_text_issues(text: str, name: str) -> list[ConfigIssue]:
    """Every problem `validate` finds in a recipe alone (the model, its cross-field checks, vLLM's table for
    `vllm.extra`), for a recipe held as text: `recipe import` checks what it writes before writing it."""
    rdoc = parse_document(text, name)
    try:
        recipe = Recipe.model_validate(rdoc.data())
    except ValidationError as exc:
        return _issues_from(exc, rdoc, Recipe)
    return [rdoc.issue(loc, msg) for loc, msg in recipe_problems(recipe)] + flag_issues(recipe, rdoc)
