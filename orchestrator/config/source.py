"""YAML documents that remember where each key came from, so every error can name file and line."""

from __future__ import annotations

import re
import shlex
import warnings
from collections.abc import Mapping, Sequence, Set
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterable

from ruamel.yaml import YAML
from ruamel.yaml.comments import CommentedMap, CommentedSeq
from ruamel.yaml.composer import MaxDepthExceededError
from ruamel.yaml.constructor import ConstructorError, RoundTripConstructor
from ruamel.yaml.error import MarkedYAMLError, ReusedAnchorWarning, YAMLError
from ruamel.yaml.reader import ReaderError

from .files import FileRefused, read_regular
from .hints import SHALLOW, SYNTAX, fixed, line_hint, syntax_fix, with_line_hint
from .types import redact

# Where an override's errors are located: `--set vllm.max_model_len` names the command line, not a file.
SET = "--set"


@dataclass
class ConfigIssue:
    """One problem in one input file: where it is, what is wrong and, after `; fix: `, what to write instead."""

    file: str
    line: int | None
    key: str
    message: str

    def __post_init__(self) -> None:
        # Messages quote offending values; a credential-shaped one must never be repeated back.
        self.key, self.message = redact(self.key), redact(self.message)

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line else self.file
        key = f" {self.key}:" if self.key and self.file != f"{SET} {self.key}" else ""
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
    lines: tuple[str, ...] = ()  # the raw text, for plain-words hints about tabs and typographic quotes
    # (location, KEY) per `--set KEY=VALUE` applied (config/overrides.py): errors at or below it name it
    overridden: tuple[tuple[tuple[Any, ...], str], ...] = ()

    def override_at(self, loc: tuple[Any, ...]) -> str | None:
        """The `--set` KEY that wrote `loc` or a mapping it is inside (the last one given wins), or None."""
        for where, key in reversed(self.overridden):
            if tuple(loc[: len(where)]) == where:
                return key
        return None

    def line_of(self, loc: tuple[Any, ...]) -> int | None:
        """1-based line of the deepest key of `loc` that exists in the file (None without a tree)."""
        if self.tree is None:
            return None
        node, line = self.tree, _first_line(self.tree)
        for part in loc:
            if isinstance(node, CommentedMap) and part in node:
                if part not in (node.lc.data or {}):  # written by an override: no line of the file
                    break
                line = node.lc.key(part)[0] + 1
                node = node[part]
            elif isinstance(node, CommentedSeq) and isinstance(part, int) and 0 <= part < len(node):
                # An alias item records its anchor's line, which may come before this list: use the list's then.
                line = max(line, node.lc.item(part)[0] + 1)
                node = node[part]
            else:
                break
        return line

    def issue(self, loc: tuple[Any, ...], message: str) -> ConfigIssue:
        key = ".".join(str(p) for p in loc)
        override = self.override_at(loc)
        if override is not None:
            return ConfigIssue(f"{SET} {override}", None, key, message)
        line = self.line_of(loc)
        hint = line_hint(self.lines[line - 1]) if line and 0 < line <= len(self.lines) else None
        return ConfigIssue(self.path, line, key, with_line_hint(message, hint))

    def data(self) -> Any:
        """Plain data for validation, within the alias, size and depth limits (else ConfigError)."""
        try:
            return plain(self.tree)
        except TooComplex as exc:
            raise ConfigError([self.issue(exc.loc, exc.message)]) from None
        except (RecursionError, MemoryError):
            raise ConfigError([ConfigIssue(self.path, None, "", _TOO_LARGE)]) from None


_DUPLICATE_VALUES = re.compile(r' with value ".*?" \(original value: ".*?"\)$', re.DOTALL)


# Real recipes are 2-3 KiB, a 64-node inventory ~15 KiB. ruamel's pure-Python parser reads only about
# 50 KiB/s on a busy 2-core machine, so this bound is also what keeps any answer within about a second.
MAX_FILE_BYTES = 64 * 1024
# Nesting deeper than this is no recipe; stopping here also keeps ruamel and plain() far from
# Python's recursion limit.
MAX_DEPTH = 64
# Values after expanding aliases: a few KiB of YAML can alias itself into billions ("billion laughs").
MAX_VALUES = 20_000


class _Constructor(RoundTripConstructor):
    """Scalars that cannot be converted (an int of 5000 digits, month 13) raise a plain ValueError in
    ruamel; give them the node's position like every other YAML error."""

    def construct_object(self, node: Any, deep: bool = False) -> Any:
        try:
            return super().construct_object(node, deep=deep)
        except (ValueError, OverflowError) as exc:
            reason = str(exc).split(";")[0]  # drop Python's "use sys.set_int_max_str_digits()" advice
            raise ConstructorError(None, None, f"cannot read this value ({reason})", node.start_mark) from None


def round_trip() -> YAML:
    yaml = YAML(typ="rt")
    yaml.allow_duplicate_keys = False
    yaml.preserve_quotes = True  # an override's effective recipe is dumped again: "no" stays quoted (plain() unquotes)
    yaml.max_depth = MAX_DEPTH
    yaml.Constructor = _Constructor
    return yaml


def _refuse(name: str, line: int | None, message: str) -> ConfigError:
    return ConfigError([ConfigIssue(name, line, "", message)])


_TOO_LARGE = fixed("too large or too deeply nested to read", "a recipe or an inventory is a few KiB of `key: value` "
                  "lines: name the right file")
_NOT_A_MAPPING = fixed("the top level must be a mapping of keys", "write `key: value` lines from the first column "
                       "(`spark-deploy schema recipe|inventory` lists the keys)")


def read_document(path: str | Path) -> Document:
    """Parse one YAML file; unreadable, oversized or malformed files raise ConfigError with the position."""
    name = str(path)
    try:
        raw = read_regular(path, MAX_FILE_BYTES)
    except FileRefused as exc:
        raise _refuse(name, None, fixed(str(exc), exc.fix)) from None
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise _refuse(name, line, fixed(f"file is not UTF-8 text (byte 0x{raw[exc.start]:02x})",
                                        "save it as UTF-8 (your editor's encoding setting, or "
                                        f"`iconv -f latin1 -t utf-8 {shlex.quote(name)}` for a Latin-1 file)")) from None
    return parse_document(text, name)


def parse_document(text: str, name: str) -> Document:
    """Parse YAML text held in memory (a recipe recorded with a release); `name` is what its errors cite."""
    if len(text.encode()) > MAX_FILE_BYTES:
        raise _refuse(name, None, _TOO_LARGE)
    lines = text.splitlines()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", ReusedAnchorWarning)  # valid YAML; not worth a Python warning
            tree = round_trip().load(text)
    except MaxDepthExceededError as exc:
        line = exc.problem_mark.line + 1 if exc.problem_mark else None
        raise _refuse(name, line, fixed(f"nested deeper than {MAX_DEPTH} levels", SHALLOW)) from None
    except MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        context = exc.context or ""
        opened = exc.context_mark.line + 1 if exc.context_mark else None
        if context and opened and mark is not exc.context_mark and opened != line:
            context += f" (from line {opened})"  # e.g. where an unclosed '[' opened
        problem = _DUPLICATE_VALUES.sub("", str(exc.problem or ""))  # the values may be secrets
        message = fixed("invalid YAML: " + ": ".join(p for p in (context, problem) if p),
                        syntax_fix(problem, context, opened, line, lines))
        hint = line_hint(lines[line - 1]) if line and 0 < line <= len(lines) else None
        raise _refuse(name, line, with_line_hint(message, hint)) from None
    except ReaderError as exc:  # a character YAML does not allow (a raw control character)
        line = text[: exc.position].count("\n") + 1 if isinstance(exc.position, int) else None
        what = f"character #x{exc.character:04x}" if isinstance(exc.character, int) else "a character"
        raise _refuse(name, line, fixed(f"invalid YAML: {what} ({exc.reason})",
                                        "delete it: it is invisible in most editors, so retype the line")) from None
    except YAMLError as exc:
        raise _refuse(name, None, fixed(f"invalid YAML: {exc}", SYNTAX)) from None
    except (RecursionError, MemoryError):  # the limits above should make this unreachable; never a traceback
        raise _refuse(name, None, _TOO_LARGE) from None
    if not isinstance(tree, CommentedMap):
        raise _refuse(name, _first_line(tree), _NOT_A_MAPPING)
    return Document(name, tree, tuple(lines))


class TooComplex(Exception):
    """The tree cannot become plain data within the limits; `loc` is where to point the user."""

    def __init__(self, loc: tuple[Any, ...], message: str):
        super().__init__(message)
        self.loc, self.message = loc, message


def plain(node: Any, budget: int = MAX_VALUES, max_depth: int = MAX_DEPTH) -> Any:
    """The ruamel tree as plain dicts/lists/scalars (what pydantic should see).

    Aliases make the tree a graph: each use is expanded here, so the values produced are counted against
    `budget` and the nesting against `max_depth`; a node that contains itself is refused. Raises TooComplex
    naming the location of the outermost alias use that led there (or of the node itself).
    """
    left = budget
    seen: set[int] = set()  # containers already expanded once: meeting one again is an alias use

    def too_many(loc: tuple[Any, ...], via: tuple[Any, ...] | None) -> TooComplex:
        if via is None:
            return TooComplex(loc, fixed(f"more than {budget} values", "no recipe or inventory needs this many: "
                                         "name the right file"))
        return TooComplex(via, fixed(f"this alias expands the document past {budget} values (each use of an alias "
                                     "repeats all it names)", "write the values out where they are needed, "
                                     "without this alias (*name)"))

    def walk(value: Any, loc: tuple[Any, ...], ancestors: frozenset[int], via: tuple[Any, ...] | None) -> Any:
        nonlocal left
        left -= 1
        if not isinstance(value, (dict, list)):
            if left < 0:
                raise too_many(loc, via)
            return str(value) if isinstance(value, str) else value  # a quoted scalar is ruamel's str subclass
        ident = id(value)
        if ident in ancestors:
            raise TooComplex(loc, fixed("refers to itself through a YAML alias", "point the alias (*name) at "
                                        "another anchor (&name) than one this value is inside"))
        if via is None and ident in seen:
            via = loc
        seen.add(ident)
        if left < 0:
            raise too_many(loc, via)
        if len(loc) >= max_depth:
            raise TooComplex(via or loc, fixed(f"nested deeper than {max_depth} levels", SHALLOW))
        inside = ancestors | {ident}
        if isinstance(value, list):
            return [walk(v, loc + (i,), inside, via) for i, v in enumerate(value)]
        out = {}
        for k, v in value.items():
            if isinstance(k, (Mapping, Sequence, Set)) and not isinstance(k, str):
                raise TooComplex(loc, fixed("a key must be a plain value, not a mapping or a list",
                                            "write the key as text (`name: value`)"))
            key = k if isinstance(k, (str, int, float, bool)) else str(k)
            out[key] = walk(v, loc + (key,), inside, via)
        return out

    return walk(node, (), frozenset(), None)
