"""`vllm.extra` checked offline against vLLM's own `serve` option table, so `validate` catches a mistyped
flag before any node is contacted.

The table (names, actions, types, choices of vLLM 0.33.0) is orchestrator/vllm_table/, generated from
vLLM's own parser; the simulated cluster's stand-in builds its parser from the same modules (its image ships
them). The pinned image's own parser is the authority: once preflight has cached it (config/flag_table.py),
which options exist and which values a closed set takes are its answer; how a value is typed (an integer,
a JSON object) is read from the shipped table for the options it has.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from enum import Enum
from typing import TYPE_CHECKING

from ..vllm_table import options_table as _table
from .flag_table import BUNDLED, REFRESH, FlagTable, table_for
from .hints import closest, fixed, yaml_line
from ..vllm_table.argtypes import DEFAULTS, resolve, takes_json, top_level_keys

if TYPE_CHECKING:  # recipe.py imports this module for its problems
    from .recipe import Recipe
    from .source import ConfigIssue, Document

VLLM_VERSION: str = _table.VERSION


class Action(str, Enum):
    """How an option consumes the command line: a switch takes no value, a value option takes one."""

    STORE = "store"
    APPEND = "append"
    STORE_TRUE = "store_true"
    ENABLE_DISABLE = "enable_disable"
    HELP = "help"


@dataclass(frozen=True)
class Option:
    strings: tuple[str, ...]  # every spelling argparse accepts, hidden aliases included
    dest: str
    action: Action
    type_name: str | None
    choices: tuple | None
    nargs: int | str | None
    default: object = None

    @property
    def switch(self) -> bool:
        return self.action in (Action.STORE_TRUE, Action.ENABLE_DISABLE)

    @property
    def json(self) -> bool:
        return takes_json(self.type_name)

    @property
    def form(self) -> str:
        """What the option takes, in words, for messages."""
        if self.switch:
            return "a switch (true, or false where a --no- form exists)"
        if self.choices:
            return "one of " + ", ".join(str(c) for c in self.choices if c is not None)
        if self.json:
            return "a JSON object (a mapping below the key, a quoted JSON string, or dotted keys: flag.key)"
        return _TYPE_WORDS.get(_inner(self.type_name), "a string")


_TYPE_WORDS = {
    "int": "an integer", "float": "a number", "str": "a string",
    "human_readable_int": "an integer (32768, 32k = 32000, 32K = 32768)",
    "human_readable_int_or_auto": "an integer (32768, 32k = 32000, 32K = 32768) or auto",
}


def _inner(type_name: str | None) -> str | None:
    while type_name and type_name.endswith(")") and "(" in type_name:
        type_name = type_name[type_name.index("(") + 1:-1]
    return type_name


def _options() -> dict[str, Option]:
    by_name: dict[str, Option] = {}
    for strings, hidden, dest, _group, action, type_, choices, nargs, default, _metavar in _table.OPTIONS:
        option = Option(tuple(strings) + tuple(hidden), dest, Action(action), type_, choices, nargs, default)
        for s in option.strings:
            if s.startswith("--"):
                by_name[s[2:]] = option
    return by_name


OPTIONS: dict[str, Option] = _options()


_EXAMPLES = {"int": 16, "float": 0.5, "str": "text", "human_readable_int": "32k", "human_readable_int_or_auto": "32k"}


def _example(base: str, option: Option, accepted: tuple | None = None) -> str:
    """A line that would parse, for a fix: the option's default when it has a plain one."""
    default, choices = option.default, accepted or option.choices
    if choices:
        value = default if default in choices else next(c for c in choices if c is not None)
    elif isinstance(default, (int, float)) and not isinstance(default, bool):
        value = default
    else:
        value = _EXAMPLES.get(_inner(option.type_name) or "str", "text")
    return yaml_line(base, value)


def _accepted_words(accepted: tuple) -> str:
    return "one of " + ", ".join(str(c) for c in accepted if c is not None)


def _convert(option: Option, base: str, raw: str, accepted: tuple | None, table: FlagTable,
             written: str | None = None) -> str | None:
    """The real parser's verdict on one value: None if it takes it, else the reason and the fix.
    `accepted`: the closed set the table gives (argparse's choices, or the values a list metavar names);
    `written`: the recipe's key for a typed field (`kv_cache_dtype`), so the fix shows the line to write."""
    try:
        convert = resolve(option.type_name, option.dest, option.choices)
    except KeyError:
        return None  # a type the stand-in cannot name: leave it to preflight
    try:
        value = convert(raw) if convert is not None else raw
    except (ValueError, TypeError, argparse.ArgumentTypeError) as exc:
        detail = " ".join(line.strip() for line in str(exc).splitlines()) \
            if isinstance(exc, argparse.ArgumentTypeError) and option.json else ""
        return fixed(f"{raw!r} is not {option.form}" + (f" ({detail})" if detail else "")
                     + f" (as vLLM {VLLM_VERSION} parses it)",
                     "write its keys as a mapping below the key" if option.json else f"write it like {_example(base, option)}")
    if accepted and str(value) not in {str(c) for c in accepted}:
        meant = closest(str(value), [str(c) for c in accepted if c is not None])
        return fixed(f"{raw!r} is not a choice: {_accepted_words(accepted)} (in {table.source})",
                     (f"did you mean {yaml_line(written, meant) if written else meant}?" if meant else
                      f"write one of them, e.g. {_example(written or base, option, accepted)}"))
    return None


def _unknown_flag(base: str, table: FlagTable) -> str:
    meant = closest(base, table.long_names())
    if meant:
        return fixed(f"--{base} is not a `vllm serve` option in {table.source}", f"did you mean --{meant}?")
    return fixed(f"--{base} is not a `vllm serve` option in {table.source}",
                 "remove it" if table.image else f"remove it; if the pinned image's vLLM has it: {REFRESH}")


def _image_only(base: str, value: object, table: FlagTable) -> str | None:
    """An option the image's parser has and the shipped table does not: only its closed set is known."""
    accepted = table.accepted(base)
    if accepted and not isinstance(value, (bool, dict)) and str(value) not in {str(c) for c in accepted}:
        meant = closest(str(value), [str(c) for c in accepted if c is not None])
        return fixed(f"--{base}: {value!r} is not a choice: {_accepted_words(accepted)} (in {table.source})",
                     f"did you mean {meant}?" if meant else "write one of them")
    return None


def _unknown_config_key(option: Option, base: str, keys: list) -> str | None:
    """A key the option's config class does not have (vLLM's config classes forbid unknown fields)."""
    known = top_level_keys(DEFAULTS.get(option.dest))
    unknown = [str(k) for k in keys if known and str(k) not in known]
    if not unknown:
        return None
    meant = closest(unknown[0], sorted(known or ()))
    return fixed(f"--{base}: {unknown[0]!r} is not a key of its config class in vLLM {VLLM_VERSION}, which "
                 "refuses unknown keys", f"did you mean {meant!r}?" if meant else
                 f"use one of its keys: {', '.join(sorted(known or ()))}")


def flag_problem(flag: str, value: object, table: FlagTable = BUNDLED, written: str | None = None) -> str | None:
    """What is wrong with `vllm.extra: {flag: value}` as vLLM would parse it, or None; the message names
    the table checked, what the option takes and the fix (for a near miss, the flag meant)."""
    base, dot, _rest = flag.partition(".")
    if not table.knows(base):
        return _unknown_flag(base, table)
    option = OPTIONS.get(base)
    if option is None:
        return _image_only(base, value, table)
    if option.json:
        keys = [_rest.split(".")[0].rstrip("+")] if dot else list(value) if isinstance(value, dict) else []
        problem = _unknown_config_key(option, base, keys)
        if problem:
            return problem
    if dot:  # one key of a JSON option: vLLM folds the dotted keys into one JSON value; any value is a leaf
        return None if option.json else fixed(f"--{base} takes {option.form}, so dotted keys (--{flag}) do not "
                                              "apply to it", f"write it like {_example(base, option)}")
    if value is True:
        if not option.switch and option.nargs not in ("?", 0):
            return fixed(f"--{base} needs a value: {option.form}; `true` would pass the flag alone",
                         f"write it like {_example(base, option)}")
        return None
    if value is False:
        if (f"--no-{base}" in option.strings) if table.image is None else table.knows(f"no-{base}"):
            return None
        negatives = [s for s in option.strings if s != f"--{base}" and s.startswith(("--no-", "--disable-"))]
        fix = f"write `{negatives[0][2:]}: true`" if negatives and option.switch else "remove the key to keep vLLM's default"
        return fixed(f"--{base} has no --no-{base} form in vLLM {VLLM_VERSION}", fix)
    if option.switch:
        return fixed(f"--{base} is {option.form}, not {value!r}", f"write true or false: `{base}: true`")
    if isinstance(value, dict) and not option.json:
        return fixed(f"--{base} takes {option.form}, not a mapping", f"write it like {_example(base, option)}")
    raw = json.dumps(value, separators=(",", ":")) if isinstance(value, dict) else str(value)
    problem = _convert(option, base, raw, table.accepted(base), table, written)
    return f"--{base}: {problem}" if problem else None


def extra_problems(extra: dict[str, object], table: FlagTable = BUNDLED) -> list[tuple[tuple, str]]:
    """Every `vllm.extra` key vLLM would refuse, as (location, message) for file:line issues."""
    found = []
    for flag, value in extra.items():
        message = flag_problem(flag, value, table)
        if message is not None:
            found.append((("vllm", "extra", flag), message))
    return found


def typed_problems(vllm: object, owned: dict[str, str], table: FlagTable = BUNDLED) -> list[tuple[tuple, str]]:
    """Every typed `vllm.*` field that owns a flag with a closed set of values (kv_cache_dtype,
    moe_backend, distributed_executor_backend, ...), checked against the table like any flag: the recipe
    keeps no list of its own. `owned`: flag -> the field's dotted name (recipe.OWNED_FLAGS)."""
    found = []
    for flag, owner in owned.items():
        section, _, key = owner.partition(".")
        value = getattr(vllm, key, None) if section == "vllm" else None
        if isinstance(value, str) and table.accepted(flag):
            message = flag_problem(flag, value, table, written=key)
            if message is not None:
                found.append((("vllm", key), message))
    return found


def flag_issues(recipe: Recipe, doc: Document) -> list[ConfigIssue]:
    """`vllm.extra` checked against the recipe's table (the pinned image's when cached), as file:line
    issues: `validate`, `render` and `up` all call this, so a flag gets one verdict, before any node is
    contacted."""
    return [doc.issue(loc, msg) for loc, msg in extra_problems(dict(recipe.vllm.extra), table_for(recipe.image.id))]


def judged_against(recipe: Recipe) -> str:
    """The table the recipe's flags and typed choices are judged against, in words (validate, render and up
    say it)."""
    return table_for(recipe.image.id).source
