"""`--set KEY=VALUE`: dotted recipe keys applied to the parsed document before the model validates it.

Applied to the YAML tree, not to the validated model, so an override is typed and checked exactly like a
line of the file (VALUE is read as YAML: 8192 is a number, true a switch, "8192" text), every later check
sees it, and its errors are located as `--set KEY` instead of a file:line. The tree, comments and all, is
then the effective recipe a release records (`effective_text`)."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any, Sequence

from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import YAMLError

from .message import fixed
from .source import SET, ConfigError, ConfigIssue, Document, round_trip


@dataclass(frozen=True)
class Override:
    """One `--set KEY=VALUE` as given: the dotted key, its parts, and VALUE read as YAML."""

    key: str
    parts: tuple[str, ...]
    text: str  # VALUE as typed
    value: Any


def _issue(key: str, message: str) -> ConfigIssue:
    return ConfigIssue(f"{SET} {key}", None, key, message)


def parse_overrides(given: Sequence[str]) -> list[Override]:
    """Each KEY=VALUE, its VALUE read as a YAML value. Raises ConfigError naming every malformed one."""
    found, issues = [], []
    for item in given:
        key, sep, text = item.partition("=")
        key = key.strip()
        parts = tuple(key.split("."))
        if not sep or not key or any(not p.strip() or p != p.strip() for p in parts):
            issues.append(ConfigIssue(SET, None, "", fixed(
                f"{item!r} is not KEY=VALUE with a dotted recipe key",
                "write e.g. `--set vllm.max_model_len=8192` (`spark-deploy schema recipe` lists the keys)")))
            continue
        try:
            value = round_trip().load(text) if text.strip() else None
        except YAMLError as exc:
            issues.append(_issue(key, fixed(f"cannot read {text!r} as a YAML value ({str(exc).splitlines()[0]})",
                                            f"quote it for the shell and for YAML: --set '{key}=\"...\"'")))
            continue
        found.append(Override(key, parts, text, value))
    if issues:
        raise ConfigError(issues)
    return found


def apply_overrides(doc: Document, overrides: Sequence[Override]) -> Document:
    """`doc` with every override written into its tree (later ones win), remembering which location each
    override wrote or created, so errors there name `--set KEY`. Missing mappings on the way are created; a
    key that does not exist is still written: the model's validation names it, with the key meant."""
    origins, issues = list(doc.overridden), []
    for o in overrides:
        try:
            origins.append((_write(doc.tree, o), o.key))
        except _NotWritten as exc:
            issues.append(_issue(o.key, exc.message))
    if issues:
        raise ConfigError(issues)
    return Document(doc.path, doc.tree, doc.lines, tuple(origins))


class _NotWritten(Exception):
    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


def _write(tree: CommentedMap, o: Override) -> tuple:
    """Write one override; return the location its errors are traced to (the first mapping it created, else
    the key it wrote)."""
    node: Any = tree
    loc: tuple = ()
    created: tuple | None = None
    for i, part in enumerate(o.parts):
        last = i == len(o.parts) - 1
        where = ".".join(map(str, loc))
        if isinstance(node, CommentedMap):
            key = _map_key(node, part)
            rest = ".".join(o.parts[i:])
            if i and not last and rest in node:  # a literal dotted key (compilation-config.mode: 3)
                key, last = rest, True
            loc += (key,)
            if last:
                node[key] = o.value
                return created or loc
            if not isinstance(node.get(key), (CommentedMap, CommentedSeq)):
                if node.get(key) is not None:
                    dotted = ".".join(map(str, loc))
                    raise _NotWritten(fixed(f"{dotted} is a value ({node[key]!r}), not a mapping of keys",
                                            f"set it whole: --set {dotted}=VALUE"))
                node[key] = CommentedMap()
                created = created or loc
            node = node[key]
        elif isinstance(node, CommentedSeq):
            if not part.isdigit() or int(part) >= len(node):
                raise _NotWritten(fixed(f"{where} is a list of {len(node)} item(s): {part!r} is not one of its "
                                        "indexes", f"name an item by its index, from 0 to {len(node) - 1}"
                                        if node else f"set the whole list: --set {where}='[...]'"))
            loc += (int(part),)
            if last:
                node[int(part)] = o.value
                return created or loc
            node = node[int(part)]
        else:
            raise _NotWritten(fixed(f"{where} is a value, not a mapping of keys", f"set it whole: --set {where}=VALUE"))
    return created or loc


def _map_key(node: CommentedMap, part: str) -> Any:
    """The key as the mapping holds it: `0` may be an int key in YAML; a dotted part is text otherwise."""
    if part not in node and part.lstrip("-").isdigit() and int(part) in node:
        return int(part)
    return part


def effective_text(doc: Document) -> str:
    """The document as YAML again, comments, quotes and indentation kept: the recipe as deployed with its
    overrides (only the overridden lines differ from the file)."""
    yaml = round_trip()
    yaml.width = 4096  # never fold a long line the file did not fold
    mapping, offset = _indents(doc.lines)
    yaml.indent(mapping=mapping, sequence=offset + 2, offset=offset)
    yaml.representer.add_representer(type(None), lambda r, _: r.represent_scalar("tag:yaml.org,2002:null", "null"))
    buf = io.StringIO()
    yaml.dump(doc.tree, buf)
    return buf.getvalue()


def _indents(lines: Sequence[str]) -> tuple[int, int]:
    """(a nested mapping's indent, a list dash's indent under its key) as the file writes them: 2 and 0 unless
    the file shows otherwise."""
    mapping = offset = None
    previous = None  # (indent, was a `key:` opening a block)
    for line in lines:
        body = line.lstrip(" ")
        if not body or body.startswith("#"):
            continue
        indent = len(line) - len(body)
        if previous is not None and previous[1] and indent > previous[0]:
            step = indent - previous[0]
            if body.startswith("- "):
                offset = step if offset is None else offset
            elif mapping is None:
                mapping = step
        previous = (indent + (2 if body.startswith("- ") else 0), body.rstrip().endswith(":"))
    return mapping or 2, offset or 0
