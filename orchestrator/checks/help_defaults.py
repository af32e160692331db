"""Pure: each option's default as `vllm serve --help=all` prints it (argparse's `(default: X)` at the end of
the option's help), so two images' parsers can be compared: a default that changed for a flag the recipe
leaves unset changes what runs without any line of the recipe changing (`upgrade` shows them)."""

from __future__ import annotations

import re

from .help_parse import _OPTION_LINE, _split

_MARK = "(default: "


def _blocks(text: str) -> list[tuple[str, str]]:
    """(invocation, the option's whole help text, its lines joined by one space) per option line."""
    blocks: list[tuple[str, list[str]]] = []
    for line in text.splitlines():
        m = _OPTION_LINE.match(line)
        if m:
            invocation, *first = re.split(r"\s{2,}", m.group(1), maxsplit=1)
            blocks.append((invocation, first))
        elif blocks and line.startswith("   "):
            blocks[-1][1].append(line.strip())
        elif blocks and not line.strip():
            blocks.append(("", []))  # a blank line ends the option's help
    return [(inv, " ".join(p for p in parts if p)) for inv, parts in blocks if inv]


def parse_defaults(text: str) -> dict[str, str]:
    """First long option string of every option -> its printed default (options printing none are left out)."""
    found: dict[str, str] = {}
    for invocation, body in _blocks(text):
        at = body.rfind(_MARK)
        if at < 0 or not body.endswith(")"):
            continue
        names = [name for name, _ in _split(invocation) if name.startswith("--")]
        if names:
            found[names[0]] = body[at + len(_MARK):-1]
    return found


def changed_defaults(old: dict[str, str], new: dict[str, str], used: set[str]) -> list[str]:
    """`--flag: A -> B` for every option both print whose default differs, leaving out those in `used`."""
    return [f"{name}: {old[name]} -> {new[name]}" for name in sorted(old.keys() & new.keys())
            if name not in used and old[name] != new[name]]
