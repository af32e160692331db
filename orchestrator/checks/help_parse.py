"""Pure parsing of `vllm serve --help=all` (argparse's layout) into every option string and its choices.

vLLM since ~0.9 prints only a list of config groups for plain `--help` and every flag for `--help=all`;
older images refuse `--help=all` and print every flag for `--help`. `layout` tells the two apart, so a
group list is never mistaken for "an image with no flags".

What the help text shows, and how it maps onto what the parser accepts (held against the real 0.33.0
parser's own table, tests/data/vllm/options.json, in the unit tests):
- an option line is two spaces then the invocation (`--a METAVAR, -b METAVAR`), its help after two or
  more spaces or on the next lines;
- choices are shown only when argparse enforces them, as `{a,b,c}` (nargs '+' adds ` [{a,b,c} ...]`);
  a list-shaped metavar (`['auto', 'fp8']`, --kv-cache-dtype) or `{...} or name registered in ...`
  (--tool-call-parser) is NOT enforced by argparse, so it is not a choice list here;
- vLLM's EnableDisableAction (a line with two or more long strings and no metavar, e.g.
  `--enable-x, --disable-x`) also accepts the hidden `--no-<first>` (`--no-enable-x`), never printed.
"""

from __future__ import annotations

import ast
import re
from enum import StrEnum

Options = dict[str, tuple[str, ...] | None]  # option string -> the choices argparse enforces, or None

_OPTION_LINE = re.compile(r"^  (-[^\s].*)$")
_OPT_STRING = re.compile(r"(?:^|, )(--?[A-Za-z0-9][A-Za-z0-9_.+-]*)")
_CHOICES = re.compile(r"\{([^{}]*)\}(?: \[\{[^{}]*\} \.\.\.\])?")


class Layout(StrEnum):
    FULL = "every flag"  # --help=all (0.9+), or plain --help of an older image
    GROUPS = "group list only"  # plain --help of vLLM 0.9+: no flags
    UNKNOWN = "not argparse help"


def _invocations(text: str) -> list[str]:
    """The invocation part of every option line (help text after two spaces cut off)."""
    out = []
    for line in text.splitlines():
        m = _OPTION_LINE.match(line)
        if m:
            out.append(re.split(r"\s{2,}", m.group(1), maxsplit=1)[0])
    return out


def layout(text: str) -> Layout:
    """Which help this is: the full flag listing, the 0.9+ group list, or something else."""
    invocations = [i for i in _invocations(text) if not i.startswith("-h, --help")]
    if invocations:
        return Layout.FULL
    if "usage:" in text and ("Config Groups:" in text or "--help=all" in text):
        return Layout.GROUPS
    return Layout.UNKNOWN


def _split(invocation: str) -> list[tuple[str, str]]:
    """`--a A, -b A` -> [("--a", "A"), ("-b", "A")]: each option string with its argument text."""
    hits = list(_OPT_STRING.finditer(invocation))
    parts = []
    for i, m in enumerate(hits):
        end = hits[i + 1].start() if i + 1 < len(hits) else len(invocation)
        parts.append((m.group(1), invocation[m.end():end].strip()))
    return parts


def _choices(argument: str) -> tuple[str, ...] | None:
    m = _CHOICES.fullmatch(argument)
    return tuple(m.group(1).split(",")) if m else None


def parse_help(text: str) -> Options:
    """Every option string the parser accepts (aliases and the hidden `--no-` forms included) -> its
    enforced choices or None. Raises ValueError when the text is not a full flag listing."""
    kind = layout(text)
    if kind is not Layout.FULL:
        raise ValueError(f"not a full flag listing ({kind})")
    options: Options = {}
    for invocation in _invocations(text):
        parts = _split(invocation)
        if not parts:
            continue
        choices = next((c for _, arg in parts if (c := _choices(arg)) is not None), None)
        for name, _ in parts:
            options[name] = choices
        longs = [name for name, arg in parts if name.startswith("--") and not arg]
        if len(longs) >= 2 and len(longs) == len([p for p in parts if p[0].startswith("--")]):
            options.setdefault("--no-" + longs[0][2:], None)
    return options


def parse_listed(text: str) -> dict[str, tuple[str, ...]]:
    """Every option whose metavar is a list (`--kv-cache-dtype ['auto', 'fp8']`) -> the values it lists:
    argparse passes any value, vLLM's config class refuses the others when the engine is built."""
    listed: dict[str, tuple[str, ...]] = {}
    for invocation in _invocations(text):
        for name, argument in _split(invocation):
            if argument.startswith("[") and argument.endswith("]") and not argument.startswith("[{"):
                try:
                    values = ast.literal_eval(argument)
                except (ValueError, SyntaxError):
                    continue
                if isinstance(values, list) and all(isinstance(v, str) for v in values):
                    listed[name] = tuple(values)
    return listed


def canonical(flag: str, options: Options) -> str:
    """The option string vLLM's FlexibleArgumentParser reads a token as: `--max_model_len=1` ->
    `--max-model-len`, `--compilation-config.mode` -> `--compilation-config`, `-O3` ->
    `--optimization-level` (only when the image has it)."""
    key = flag.partition("=")[0]
    if key.startswith("-O") and not key.startswith("--") and "--optimization-level" in options:
        return "--optimization-level"
    if key.startswith("--"):
        base = key.partition(".")[0]
        return "--" + base[2:].replace("_", "-")
    return key


__all__ = ["Layout", "Options", "canonical", "layout", "parse_help", "parse_listed"]
