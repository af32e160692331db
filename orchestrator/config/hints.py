"""The fix behind an error: the key meant, the value read and the forms accepted, and plain words for
characters YAML reads differently from what the eye sees (tabs, typographic quotes)."""

from __future__ import annotations

import difflib
import json
import re
import types
import typing
from typing import Any

from pydantic import BaseModel

from .forms import DOCKER_SIZE
from .message import FIX, fixed

SMART_QUOTES = "\u201c\u201d\u2018\u2019\u00ab\u00bb\u201e"


def suggest(word: str, candidates, prefix: str = "") -> str:
    """' (did you mean X?)' for the closest candidate, or ''. Shared by every name a user can mistype."""
    close = closest(word, candidates)
    return f" (did you mean {prefix}{close}?)" if close else ""


def closest(word: str, candidates) -> str | None:
    found = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1, cutoff=0.75)
    return found[0] if found else None


def yaml_value(value: Any) -> str:
    """`value` as it would be written after `key: ` in YAML (for a fix that shows the line to write)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return str(value)
    text = str(value)
    plain = re.fullmatch(r"[A-Za-z_/][A-Za-z0-9_./@+-]*", text) and text.lower() not in (
        "true", "false", "yes", "no", "on", "off", "null", "y", "n")
    return text if plain else json.dumps(text, ensure_ascii=False)


def yaml_line(key: Any, value: Any) -> str:
    """`key: value` in backquotes; a mapping or list shows only `key:` (its lines follow below it)."""
    return f"`{key}:`" if isinstance(value, (dict, list)) else f"`{key}: {yaml_value(value)}`"


def line_hint(text: str) -> tuple[str, str] | None:
    """What a line's invisible or look-alike characters do to YAML, and the fix, or None."""
    if text[: len(text) - len(text.lstrip())].count("\t"):
        return "the line is indented with a tab (YAML indents with spaces only)", "replace the tab with spaces"
    quotes = sorted({c for c in text if c in SMART_QUOTES})
    if quotes:
        return (f"the line holds typographic quotes ({' '.join(quotes)}), which YAML keeps as part of the text "
                "(an editor's 'smart quotes' make them)", "replace them with plain \" or '")
    return None


def with_line_hint(message: str, hint: tuple[str, str] | None) -> str:
    """`message` with what the line's characters do; their fix comes first, being the likely cause."""
    if hint is None:
        return message
    return fixed(f"{message.partition(FIX)[0]}; {hint[0]}", hint[1])


def _models_in(annotation: Any) -> list[type[BaseModel]]:
    """The models a field's annotation can hold, through Optional, list[...] and dict[..., ...]."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return [annotation]
    found: list[type[BaseModel]] = []
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, list, dict, typing.Annotated):
        for arg in typing.get_args(annotation):
            found += _models_in(arg)
    return found


def keys_at(model: type[BaseModel], loc: tuple) -> list[str]:
    """The keys a mapping at `loc` (the parent of an unknown key) accepts, following the model."""
    models = [model]
    for part in loc:
        if isinstance(part, int):
            continue
        nxt: list[type[BaseModel]] = []
        for m in models:
            field = m.model_fields.get(str(part))
            nxt += _models_in(field.annotation) if field is not None else []
        if not nxt:
            return [k for m in models for k in m.model_fields] if isinstance(part, int) else []
        models = nxt
    return [k for m in models for k in m.model_fields]


def example_of(model: type[BaseModel], loc: tuple) -> Any:
    """The first example the model gives for the field at `loc` (else its default) when it is a plain value,
    else None."""
    models = [model]
    for part in loc[:-1]:
        if isinstance(part, int):
            continue
        models = [m for parent in models for f in [parent.model_fields.get(str(part))] if f is not None
                  for m in _models_in(f.annotation)]
    for m in models:
        field = m.model_fields.get(str(loc[-1])) if loc else None
        if field is not None and field.examples and not isinstance(field.examples[0], (dict, list)):
            return field.examples[0]
        if field is not None and isinstance(field.default, (str, int, float)) and field.default is not None:
            return field.default
    return None


def _shown(value: Any) -> str:
    if isinstance(value, (dict, list)):
        kind = "a mapping" if isinstance(value, dict) else "a list"
        return kind
    kind = {bool: "true/false", int: "an integer", float: "a number", str: "text"}.get(type(value), type(value).__name__)
    return f"{value!r} ({kind})"


def _as(kind: str, value: Any) -> Any:
    """The value read, converted to what the key takes, when that is plain (None: it is not)."""
    text = str(value).strip()
    try:
        if kind == "int" and not isinstance(value, bool):
            return int(text) if text.lstrip("+-").isdigit() else int(float(text)) if float(text).is_integer() else None
        if kind == "float" and not isinstance(value, bool):
            return float(text)
    except ValueError:
        return None
    if kind == "bool":
        return {"true": True, "yes": True, "on": True, "1": True,
                "false": False, "no": False, "off": False, "0": False}.get(text.lower())
    return None


def _type_fix(kind: str, key: str, value: Any, known: Any) -> str | None:
    converted = _as(kind, value) if not isinstance(value, (dict, list)) else None
    example = {"int": 2, "float": 0.7, "bool": True}
    if known is not None and _as(kind, known) is not None:
        example[kind] = known
    if kind in example:
        words = {"int": "an integer without quotes", "float": "a number without quotes",
                 "bool": "true or false, without quotes"}[kind]
        shown = yaml_line(key, converted) if converted is not None else f"e.g. {yaml_line(key, example[kind])}"
        return f"write {words}: {shown}"
    if kind == "string":
        return f"write text; put it in quotes when YAML would read a number or true/false: `{key}: \"{value}\"`" \
            if not isinstance(value, (dict, list)) else f"write text on the key's own line: `{key}: some text`"
    if kind in ("dict", "model"):
        return f"write a mapping: indented `name: value` lines below `{key}:`"
    if kind == "list":
        return f"write a list: lines starting with '- ' below `{key}:`"
    return None


def type_hint(err: dict, key: str, example: Any = None) -> str:
    """': read X; fix: write Y' for a pydantic type error, or '' when the error is not about a value's type.
    `example`: the field's own example or default, shown when the value read cannot be converted."""
    kind = err["type"].split("_")[0]
    if not err["type"].endswith(("_type", "_parsing", "_from_float")):
        return ""
    fix = _type_fix(kind, key, err.get("input"), example)
    return f": read {_shown(err.get('input'))}{FIX}{fix}" if fix else ""


_PATTERNS = {  # pattern: (what it is, an example of the right form)
    DOCKER_SIZE: ("a size as Docker takes it: bytes, or a number with k, m or g", "16g"),
    r"^([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*|/[^:,]+)$":
        ("a Hugging Face repo id (org/name) or an absolute path inside the container", "Qwen/Qwen3-0.6B"),
    r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$": ("a branch, tag or commit (letters, digits, '.', '_', '/', '-')", "main"),
    r"^[0-9A-Fa-f.:]+$": ("an IP address to bind (0.0.0.0: every address)", "0.0.0.0"),
}


def pattern_words(pattern: str) -> str:
    """A regex constraint in words; the regex itself only for a pattern nobody described."""
    return _PATTERNS[pattern][0] if pattern in _PATTERNS else f"of the form {pattern}"


def pattern_message(value: Any, pattern: str, key: str) -> str:
    """`value` refused by a pattern: what the key takes, and a line of the right form."""
    what, example = _PATTERNS.get(pattern, (f"of the form {pattern}", None))
    fix = f"write it like {yaml_line(key, example)}" if example else f"write a value {what}"
    return fixed(f"{value!r} is not {what}", fix)


SHALLOW = "nest less: no key of a recipe or an inventory is more than 6 levels deep"
SYNTAX = "write `key: value` lines, indented by spaces; quote a value holding ': ' or ' #'"


def syntax_fix(problem: str, context: str, opened: int | None, line: int | None, lines: list[str]) -> str:
    """What to change for one of the YAML parser's complaints, in the file's own terms."""
    duplicate = re.search(r'found duplicate key "(.*?)"', problem)
    if duplicate:
        key = duplicate.group(1)
        indent = len(lines[line - 1]) - len(lines[line - 1].lstrip()) if line and line <= len(lines) else 0
        first = next((i + 1 for i in range((opened or 1) - 1, (line or 1) - 1) if i < len(lines)
                      and re.match(rf"\s{{{indent}}}{re.escape(key)}\s*:", lines[i])), None)
        where = f"the one on line {first}" if first else "the other"
        return f"delete this `{key}:` or {where}: a key appears once in a mapping"
    if "cannot read this value" in problem:
        return "write a smaller number, or put the value in quotes to keep it as text"
    for kind, opener, close in (("flow sequence", "[", "]"), ("flow mapping", "{", "}")):
        if kind in context and opened:
            return f"end the '{opener}' of line {opened} with '{close}' on that line (or quote an item holding ',' or ':')"
    if "quoted scalar" in context and opened:
        return f"close the quote opened on line {opened} (a quote inside it is written \\\" or '')"
    if "mapping values are not allowed" in problem:
        return "put a space after a key's ':'; quote a value that holds ': ' (`key: \"a: b\"`)"
    if "could not find expected ':'" in problem or "expected <block end>" in problem:
        return "indent this line like its neighbours and write `key: value`"
    if "cannot start any token" in problem:
        return "put the value in quotes (`key: \"...\"`): YAML reserves its first character"
    return SYNTAX


def regex_fix(exc: re.error) -> str:
    """What to change in a pattern Python's `re` refused (a log line's literal brackets are the usual cause).
    A backslash is shown as written between YAML's single quotes (double quotes need two)."""
    words = str(exc.msg)
    if "missing )" in words or "unbalanced parenthesis" in words:
        return "add the missing ')', or write a literal ( or ) as \\( or \\) (in single quotes: 'a \\(b')"
    if "unterminated character set" in words:
        return "close the '[' with ']', or write a literal [ as \\[ (in single quotes)"
    if "nothing to repeat" in words or "multiple repeat" in words:
        return "write a literal *, + or ? as \\*, \\+ or \\? (in single quotes)"
    return "write the characters meant literally with a backslash before them (in single quotes)"
