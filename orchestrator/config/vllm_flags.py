"""`vllm.extra` checked offline against vLLM's own `serve` option table, so `validate` catches a mistyped
flag before any node is contacted.

The table (names, actions, types, choices of vLLM 0.33.0) is orchestrator/vllm_table/, generated from
vLLM's own parser; the simulated cluster's stand-in builds its parser from the same modules (its image ships
them). Preflight, which runs the pinned image's own parser, stays the authority: an image with another vLLM
may accept what this table does not.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass
from enum import Enum

from ..vllm_table import options_table as _table
from .hints import suggest
from ..vllm_table.argtypes import resolve, takes_json

VLLM_VERSION: str = _table.VERSION
_SOURCE = f"vLLM {VLLM_VERSION}'s option table (shipped with spark-deploy; preflight asks the image's own parser)"


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
            return "a JSON object (write it as a quoted string, or use dotted keys: flag.key)"
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
    for strings, hidden, dest, _group, action, type_, choices, nargs, _default, _metavar in _table.OPTIONS:
        option = Option(tuple(strings) + tuple(hidden), dest, Action(action), type_, choices, nargs)
        for s in option.strings:
            if s.startswith("--"):
                by_name[s[2:]] = option
    return by_name


OPTIONS: dict[str, Option] = _options()


def _convert(option: Option, raw: str) -> str | None:
    """The real parser's verdict on one value: None if it takes it, else the reason in words."""
    try:
        convert = resolve(option.type_name, option.dest, option.choices)
    except KeyError:
        return None  # a type the stand-in cannot name: leave it to preflight
    try:
        value = convert(raw) if convert is not None else raw
    except (ValueError, TypeError, argparse.ArgumentTypeError):
        return f"{raw!r} is not {option.form}"
    if option.choices and value not in option.choices:
        return (f"{raw!r} is not a choice: {option.form}"
                + suggest(str(value), [str(c) for c in option.choices if c is not None]))
    return None


def flag_problem(flag: str, value: object) -> str | None:
    """What is wrong with `vllm.extra: {flag: value}` as vLLM would parse it, or None; the message names
    the version, what the option takes and, for a near miss, the flag meant."""
    base, dot, _rest = flag.partition(".")
    option = OPTIONS.get(base)
    if option is None:
        return (f"--{base} is not a `vllm serve` option in {_SOURCE}"
                + (suggest(base, OPTIONS, "--") or "; see `vllm serve --help=all` for the list"))
    if dot:  # one key of a JSON option: vLLM folds the dotted keys into one JSON value; any value is a leaf
        return None if option.json else f"--{base} takes {option.form}, so dotted keys (--{flag}) do not apply to it"
    if value is True:
        if not option.switch and option.nargs not in ("?", 0):
            return f"--{base} needs a value: {option.form}; `true` would pass the flag alone"
        return None
    if value is False:
        if f"--no-{base}" in option.strings or (option.switch and f"--no-{base}" in OPTIONS):
            return None
        negatives = [s for s in option.strings if s != f"--{base}" and s.startswith(("--no-", "--disable-"))]
        fix = f"write `{negatives[0][2:]}: true`" if negatives and option.switch else "remove the key to keep vLLM's default"
        return f"--{base} has no --no-{base} form in vLLM {VLLM_VERSION}: {fix}"
    if option.switch:
        return f"--{base} is {option.form}, not {value!r}: write true or false"
    if isinstance(value, dict) and not option.json:
        return f"--{base} takes {option.form}, not a mapping"
    problem = _convert(option, json.dumps(value, separators=(",", ":")) if isinstance(value, dict) else str(value))
    return f"--{base}: {problem} (as vLLM {VLLM_VERSION} parses it)" if problem else None


def extra_problems(extra: dict[str, object]) -> list[tuple[tuple, str]]:
    """Every `vllm.extra` key vLLM's parser would refuse, as (location, message) for file:line issues."""
    found = []
    for flag, value in extra.items():
        message = flag_problem(flag, value)
        if message is not None:
            found.append((("vllm", "extra", flag), message))
    return found
