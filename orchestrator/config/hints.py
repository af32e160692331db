"""The fix behind an error: the key meant, the value read and the forms accepted, and plain words for
characters YAML reads differently from what the eye sees (tabs, typographic quotes)."""

from __future__ import annotations

import difflib
import types
import typing
from typing import Any

from pydantic import BaseModel

from .forms import DOCKER_SIZE

SMART_QUOTES = "\u201c\u201d\u2018\u2019\u00ab\u00bb\u201e"


def suggest(word: str, candidates, prefix: str = "") -> str:
    """' (did you mean X?)' for the closest candidate, or ''. Shared by every name a user can mistype."""
    close = difflib.get_close_matches(str(word), [str(c) for c in candidates], n=1, cutoff=0.75)
    return f" (did you mean {prefix}{close[0]}?)" if close else ""


def line_hint(text: str) -> str:
    """What a line's invisible or look-alike characters do to YAML, or ''."""
    hints = []
    if text[: len(text) - len(text.lstrip())].count("\t"):
        hints.append("the line is indented with a tab: YAML indents with spaces only, so replace the tab with spaces")
    quotes = sorted({c for c in text if c in SMART_QUOTES})
    if quotes:
        hints.append(f"the line holds typographic quotes ({' '.join(quotes)}), which YAML keeps as part of the text: "
                     "replace them with plain \" or ' (an editor's 'smart quotes' make them)")
    return "; ".join(hints)


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


_FORMS = {
    "int": "an integer without quotes (e.g. 2)",
    "float": "a number without quotes (e.g. 0.7)",
    "bool": "true or false, without quotes",
    "string": "text (put it in quotes when YAML would read a number or true/false, e.g. \"1\")",
    "dict": "a mapping: indented `key: value` lines below the key",
    "model": "a mapping: indented `key: value` lines below the key",
    "list": "a list: lines starting with '- ' below the key",
}


def _shown(value: Any) -> str:
    if isinstance(value, (dict, list)):
        kind = "a mapping" if isinstance(value, dict) else "a list"
        return kind
    kind = {bool: "true/false", int: "an integer", float: "a number", str: "text"}.get(type(value), type(value).__name__)
    return f"{value!r} ({kind})"


def type_hint(err: dict) -> str:
    """'; read X, write Y' for a pydantic type error, or '' when the error is not about a value's type."""
    kind = err["type"].split("_")[0]
    if kind not in _FORMS or not err["type"].endswith(("_type", "_parsing", "_from_float")):
        return ""
    return f": read {_shown(err.get('input'))}; write {_FORMS[kind]}"


_PATTERNS = {
    DOCKER_SIZE: "a size as Docker takes it: bytes, or a number with k, m or g (e.g. 16g, 16GB, 16GiB)",
    r"^([A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*|/[^:,]+)$":
        "a Hugging Face repo id (org/name) or an absolute path inside the container",
    r"^[A-Za-z0-9][A-Za-z0-9._/-]{0,127}$": "a branch, tag or commit (letters, digits, '.', '_', '/', '-')",
    r"^[0-9A-Fa-f.:]+$": "an IP address to bind (0.0.0.0: every address)",
}


def pattern_words(pattern: str) -> str:
    """A regex constraint in words; the regex itself only for a pattern nobody described."""
    return _PATTERNS.get(pattern, f"of the form {pattern}")
