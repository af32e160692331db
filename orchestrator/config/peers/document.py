"""The imported recipe as a commented YAML document: each value with its origin at the end of its line, in
the recipe model's key order, and checked as `validate` checks a recipe alone. A value that check refuses
is taken out and listed with the check's own message, so what is written always loads."""

from __future__ import annotations

import io

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq

from ..load import recipe_text_issues
from ..recipe import DockerOptions, ImageSpec, ModelSpec, Recipe, RestartPolicy, ServeSpec, VllmArgs
from ..source import ConfigError, ConfigIssue
from .parts import Left, Placed

_ORDER = {(): list(Recipe.model_fields), ("image",): list(ImageSpec.model_fields),
          ("model",): list(ModelSpec.model_fields), ("serve",): list(ServeSpec.model_fields),
          ("vllm",): list(VllmArgs.model_fields), ("docker",): list(DockerOptions.model_fields),
          ("docker", "restart"): list(RestartPolicy.model_fields)}
_LISTS = {("secrets",)}  # placed one item at a time: target ("secrets", NAME)


def distinct(placed: list[Placed]) -> tuple[list[Placed], list[Left]]:
    """The first value for a key wins; a later, different one is left, naming the one kept."""
    kept: dict[tuple[str, ...], Placed] = {}
    left: list[Left] = []
    for p in placed:
        first = kept.get(p.target)
        if first is None:
            kept[p.target] = p
        elif first.value != p.value:
            left.append(Left(p.source, f"the recipe keeps {'.'.join(p.target)} from {first.source}"))
    return list(kept.values()), left


def _rank(target: tuple[str, ...]) -> tuple:
    rank = []
    for depth in range(len(target)):
        order = _ORDER.get(target[:depth], [])
        rank.append(order.index(target[depth]) if target[depth] in order else len(order))
    return tuple(rank)


def build(placed: list[Placed], header: list[str]) -> CommentedMap:
    """The document, with `header` as its first comment lines."""
    root = CommentedMap()
    for p in sorted(placed, key=lambda p: _rank(p.target)):  # stable: the source's order within a mapping
        parent, key = root, p.target[-1]
        if p.target[:-1] in _LISTS:
            items = root.setdefault(p.target[0], CommentedSeq())
            items.append(p.value)
            items.yaml_add_eol_comment(p.comment, len(items) - 1, column=0)
            continue
        for part in p.target[:-1]:
            parent = parent.setdefault(part, CommentedMap())
        parent[key] = _block(p.value)
        parent.yaml_add_eol_comment(p.comment, key, column=0)  # one space before each: never aligned by chance
    if header:
        root.yaml_set_start_comment("\n".join(header))
    return root


def _block(value: object) -> object:
    if isinstance(value, dict):
        return CommentedMap((k, _block(v)) for k, v in value.items())
    return value


def dump(root: CommentedMap) -> str:
    yaml = YAML()
    yaml.width = 4096  # a comment or a JSON value is never folded onto a second line
    yaml.indent(mapping=2, sequence=4, offset=2)
    yaml.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    text = io.StringIO()
    yaml.dump(root, text)
    return text.getvalue()


def _offender(issue: ConfigIssue, placed: list[Placed]) -> list[Placed]:
    """The placed values an issue points at: the key itself, else what lies below it, else its parent."""
    exact = [p for p in placed if ".".join(p.target) == issue.key]
    below = [p for p in placed if ".".join(p.target).startswith(issue.key + ".")]
    above = [p for p in placed if issue.key.startswith(".".join(p.target) + ".")]
    return exact or below or above


def settle(placed: list[Placed], name: str) -> tuple[list[Placed], list[Left]]:
    """The values the recipe check takes, and those it refuses (with its message); raises ConfigError when
    what is refused cannot be left out (a key the recipe requires). `name` is what the check's issues cite."""
    placed, left = list(placed), []
    issues: list[ConfigIssue] = []
    for _ in range(len(placed) + 1):
        issues = recipe_text_issues(dump(build(placed, [])), name)
        if not issues:
            return placed, left
        for issue in issues:
            offenders = _offender(issue, placed)
            if not offenders:
                raise ConfigError(issues)
            for p in offenders:
                if p in placed:
                    placed.remove(p)
                    left.append(Left(p.source, f"not written: {issue.message}"))
    raise ConfigError(issues)
