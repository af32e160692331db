"""An argv shown as a shell command a person can read and paste: one argument per line, `\\`-continued.

Only a display: every token is shlex-quoted, so a shell reads back exactly the argv (tests run it through
bash). An option and its value share a line (`--name sd-x-r0-...`); which tokens are options is read from the
argv's shape, which only decides the line breaks, never what the shell sees.
"""

from __future__ import annotations

import shlex
from collections.abc import Sequence

INDENT = "  "


def argument_lines(argv: Sequence[str]) -> list[list[str]]:
    """The argv cut into lines: the command's leading words together (`docker run`), then each option with
    its value (the next token, when that is not an option itself), and every other token alone."""
    tokens = list(argv)
    lead = 0
    while lead < len(tokens) and lead < 2 and not tokens[lead].startswith("-"):
        lead += 1
    lines = [tokens[:lead]] if lead else []
    i = lead
    while i < len(tokens):
        token = tokens[i]
        takes_value = token.startswith("-") and "=" not in token and i + 1 < len(tokens) \
            and not tokens[i + 1].startswith("-")
        lines.append(tokens[i:i + 2] if takes_value else [token])
        i += 2 if takes_value else 1
    return lines


def continued(argv: Sequence[str]) -> str:
    """The argv as shell text, one argument per line, each line but the last ending in ` \\`."""
    lines = [" ".join(shlex.quote(t) for t in line) for line in argument_lines(argv)]
    return (" \\\n" + INDENT).join(lines)
