"""YAML documents that remember where each key came from, so every error can name file and line."""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.error import MarkedYAMLError, YAMLError
from ruamel.yaml.reader import ReaderError

from .types import redact


@dataclass
class ConfigIssue:
    """One problem in one input file: where it is and what is wrong."""

    file: str
    line: int | None
    key: str
    message: str

    def __post_init__(self) -> None:
        # Messages quote offending values; a credential-shaped one must never be repeated back.
        self.key, self.message = redact(self.key), redact(self.message)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        key = f" {self.key}:" if self.key else ""
        return f"{where}:{key} {self.message}"


class ConfigError(Exception):
    """Bad input. Carries every issue found so the user fixes them in one pass."""

    def __init__(self, issues: Iterable[ConfigIssue]):
        self.issues = list(issues)
        super().__init__("\n".join(str(i) for i in self.issues))


def _first_line(tree: Any) -> int:
    """Where a parsed document's content starts (after leading comments); 1 for an empty file or a scalar."""
    lc = getattr(tree, "lc", None)
    return lc.line + 1 if lc is not None and lc.line is not None else 1


@dataclass
class Document:
    """A parsed YAML file: plain data plus the ruamel tree that knows line numbers."""

    path: str
    tree: Any

    def line_of(self, loc: tuple[Any, ...]) -> int | None:
        """1-based line of the deepest key of `loc` that exists in the file."""
        node, line = self.tree, _first_line(self.tree)
        for part in loc:
            if isinstance(node, CommentedMap) and part in node:
                line = node.lc.key(part)[0] + 1
                node = node[part]
            elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
                line = node.lc.item(part)[0] + 1
                node = node[part]
            else:
                break
        return line

    def issue(self, loc: tuple[Any, ...], message: str) -> ConfigIssue:
        key = ".".join(str(p) for p in loc)
        return ConfigIssue(self.path, self.line_of(loc), key, message)


_DUPLICATE_VALUES = re.compile(r' with value ".*?" \(original value: ".*?"\)$', re.DOTALL)


def _yaml() -> YAML:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    return yaml


def read_document(path: str | Path) -> Document:
    """Parse one YAML file; unreadable or malformed files raise ConfigError with the position."""
    name = str(path)
    try:
        raw = Path(path).read_bytes()
    except OSError as exc:
        raise ConfigError([ConfigIssue(name, None, "", f"cannot read file: {exc.strerror or exc}")]) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise ConfigError([ConfigIssue(name, line, "", f"file is not UTF-8 text (byte 0x{raw[exc.start]:02x})")]) from None
    try:
        tree = _yaml().load(text)
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        context = exc.context or ""
        if context and exc.context_mark and mark is not exc.context_mark and exc.context_mark.line + 1 != line:
            context += f" (from line {exc.context_mark.line + 1})"  # e.g. where an unclosed '[' opened
        problem = _DUPLICATE_VALUES.sub("", str(exc.problem or ""))  # the values may be secrets
        message = ": ".join(p for p in (context, problem) if p)
        raise ConfigError([ConfigIssue(name, line, "", f"invalid YAML: {message}")]) from None
    except ReaderError as exc:  # a character YAML does not allow (a raw control character)
        line = text[: exc.position].count("\n") + 1 if isinstance(exc.position, int) else None
        what = f"character #x{exc.character:04x}" if isinstance(exc.character, int) else "a character"
        raise ConfigError([ConfigIssue(name, line, "", f"invalid YAML: {what} ({exc.reason})")]) from None
    except YAMLError as exc:
        raise ConfigError([ConfigIssue(name, None, "", f"invalid YAML: {exc}")]) from None
    if not isinstance(tree, CommentedMap):
        raise ConfigError([ConfigIssue(name, _first_line(tree), "", "the top level must be a mapping of keys")])
    return Document(name, tree)


def plain(node: Any) -> Any:
    """The ruamel tree as plain dicts/lists/scalars (what pydantic should see)."""
    if isinstance(node, dict):
        return {str(k) if not isinstance(k, (str, int, float, bool)) else k: plain(v) for k, v in node.items()}
    if isinstance(node, list):
        return [plain(v) for v in node]
    return node
