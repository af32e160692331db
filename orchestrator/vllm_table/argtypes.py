"""The real parser's type functions, named as argparse names them in `invalid <name> value: ...` errors.

options_table.py records each option's type as the real function calls itself
(`optional_type.<locals>._optional_type(int)`); `resolve` turns that name back into a function here.
"""
from __future__ import annotations

import argparse
import json
import re
from collections.abc import Callable

from . import options_table

DEFAULTS = {row[2]: row[8] for row in options_table.OPTIONS}  # dest -> the default as the table recorded it


def normalise_choice(value: str) -> str:
    """vLLM's enum flags: lower-case, '-' -> '_' (the `<lambda>` type of --moe-backend and friends)."""
    return value.lower().replace("-", "_")


def optional_type(return_type: Callable) -> Callable:
    def _optional_type(val: str):
        if val == "" or val == "None":
            return None
        return return_type(val)
    return _optional_type


def human_readable_int(value: str) -> int:
    """32768, 25.6k (x1000) or 32K (x1024; no decimals with a binary suffix), as vLLM parses sizes."""
    value = value.strip()
    match = re.fullmatch(r"(\d+(?:\.\d+)?)([kKmMgGtT])", value)
    if match:
        number, suffix = match.groups()
        decimal = {"k": 10**3, "m": 10**6, "g": 10**9, "t": 10**12}
        if suffix in decimal:
            return int(float(number) * decimal[suffix])
        binary = {"K": 2**10, "M": 2**20, "G": 2**30, "T": 2**40}[suffix]
        try:
            return int(number) * binary
        except ValueError as exc:
            raise argparse.ArgumentTypeError(
                f"Decimals are not allowed with binary suffixes like {suffix}. Did you mean to use "
                f"{number}{suffix.lower()} instead?") from exc
    return int(value)


def human_readable_int_or_auto(value: str) -> int:
    value = value.strip()
    if value in ("auto", "-1"):
        return -1
    return human_readable_int(value)


def parse_type(return_type: Callable) -> Callable:
    def _parse_type(val: str):
        try:
            return return_type(val)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(f"Value {val} cannot be converted to {return_type}.") from exc
    return _parse_type


def top_level_keys(default) -> frozenset[str] | None:
    """The fields of a config class, read from the repr the table recorded as its default
    (`{'mode': None, ...}` or `EPLBConfig(window_size=1000, ...)`); None when the repr says nothing."""
    if not isinstance(default, str) or not default.endswith(("}", ")")):
        return None
    keys, depth, i = set(), 0, 0
    pattern = re.compile(r"'(\w+)': |(\w+)=")
    while i < len(default):
        ch = default[i]
        if ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
        elif ch in "'\"" and not (depth == 1 and pattern.match(default, i)):
            i = default.index(ch, i + 1)  # skip a quoted value (it may hold brackets)
        elif depth == 1:
            match = pattern.match(default, i)
            if match and default[i - 1] in "({ ":
                keys.add(match.group(1) or match.group(2))
                i = match.end()
                continue
        i += 1
    return frozenset(keys) or None


def dataclass_parser(dest: str, keys: frozenset[str] | None = None) -> Callable:
    """A JSON config option (--compilation-config): pydantic's TypeAdapter(...).validate_json, whose config
    classes forbid unknown fields (`keys`: the class's fields, when the table's default names them)."""
    cls = "".join(part.capitalize() for part in dest.split("_"))

    def parse_dataclass(val: str):
        try:
            value = json.loads(val)
        except ValueError as exc:
            msg = getattr(exc, "msg", str(exc))
            raise argparse.ArgumentTypeError(
                f"1 validation error for {cls}\n  Invalid JSON: {msg} [type=json_invalid, "
                f"input_value={val!r}, input_type=str]") from exc
        unknown = sorted(k for k in value if k not in keys) if keys and isinstance(value, dict) else []
        if unknown:
            lines = "".join(f"\n{k}\n  Unexpected keyword argument [type=unexpected_keyword_argument, "
                            f"input_value={value[k]!r}, input_type={type(value[k]).__name__}]" for k in unknown)
            raise argparse.ArgumentTypeError(
                f"{len(unknown)} validation error{'s' if len(unknown) > 1 else ''} for {cls}{lines}")
        return value
    return parse_dataclass


def union_dict_and_str(val: str):
    if not re.match(r"(?s)^\s*{.*}\s*$", val):
        return str(val)
    return optional_type(json.loads)(val)


def parse_reasoning_parser(val: str) -> str:
    return val


def resolve(spec: str | None, dest: str, choices) -> Callable | None:
    """The function for a recorded type name (None: argparse's plain string)."""
    if spec is None:
        return None
    for wrapper, make in (("optional_type.<locals>._optional_type", optional_type),
                          ("parse_type.<locals>._parse_type", parse_type)):
        if spec.startswith(wrapper + "("):
            return make(resolve(spec[len(wrapper) + 1:-1], dest, choices) or str)
    simple = {
        "str": str, "int": int, "float": float, "loads": json.loads,
        "human_readable_int": human_readable_int, "human_readable_int_or_auto": human_readable_int_or_auto,
        "union_dict_and_str": union_dict_and_str, "parse_reasoning_parser": parse_reasoning_parser,
    }
    if spec in simple:
        return simple[spec]
    if spec == "_compute_kwargs.<locals>.parse_dataclass":
        return dataclass_parser(dest, top_level_keys(DEFAULTS.get(dest)))
    if spec == "EngineArgs.add_cli_args.<locals>.<lambda>":
        return (lambda s: normalise_choice(s)) if choices else (lambda s: s)
    raise KeyError(f"no stand-in for the type {spec!r} of --{dest}: regenerate or extend argtypes.py")


def takes_json(spec: str | None) -> bool:
    """Options whose value is a JSON object, so `--opt.key value` dotted keys apply to them."""
    return bool(spec) and any(k in spec for k in ("loads", "parse_dataclass", "union_dict_and_str"))
