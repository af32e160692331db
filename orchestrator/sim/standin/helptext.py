"""`vllm serve --help` (the group list), `--help=all`, `--help=<Group>` and `--help=<flag>`, laid out as
the real 0.33.0 prints them (help sentences are not copied: each option says only its default)."""
from __future__ import annotations

import argparse
import sys
import textwrap

from ...vllm_table import options_table as table

NAME_COLUMN = 26
WIDTH = 78


def _serve(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return subs.choices["serve"]


def group_listing() -> str:
    """Plain --help: usage, the prologue, one line per group (first paragraph of its description)."""
    lines = [f"usage: {table.USAGE}", "", table.PROLOGUE, "", table.LISTING_TITLE]
    for title, description in table.GROUPS:
        first = " ".join(description.split("\n\n")[0].split())
        if not first:
            lines.append(f"  {title}")
            continue
        lines += textwrap.wrap(first, WIDTH, initial_indent=f"  {title:<{NAME_COLUMN - 3}} ",
                               subsequent_indent=" " * NAME_COLUMN)
    return "\n".join(lines + ["", table.LISTING_FOOTER]) + "\n"


def _section(serve: argparse.ArgumentParser, group: argparse._ArgumentGroup, actions=None) -> str:
    fmt = serve._get_formatter()
    fmt.start_section(group.title)
    fmt.add_text(group.description)
    fmt.add_arguments(group._group_actions if actions is None else actions)
    fmt.end_section()
    return fmt.format_help()


def answer_help(parser: argparse.ArgumentParser, argv: list[str]) -> None:
    """Print and exit 0 when argv asks for help; return otherwise."""
    asked = [a for a in argv if a in ("-h", "--help") or a.startswith("--help=")]
    if not asked:
        return
    serve = _serve(parser)
    topic = asked[0].partition("=")[2]
    if not topic:
        sys.stdout.write(group_listing())
    elif topic.lower() == "all":
        sys.stdout.write(serve.format_help())
    else:
        groups = [g for g in serve._action_groups if g.title.lower() == topic.lower()]
        flag = "--" + topic.lstrip("-").replace("_", "-")
        if groups:
            sys.stdout.write(_section(serve, groups[0]))
        else:
            hits = [(g, [a for a in g._group_actions if flag in a.option_strings]) for g in serve._action_groups]
            hits = [(g, acts) for g, acts in hits if acts]
            if not hits:
                sys.stderr.write(f"vllm serve: error: no group or flag named {topic!r}; try --help=all\n")
                sys.exit(2)
            sys.stdout.write("".join(_section(serve, g, acts) for g, acts in hits))
    sys.stdout.flush()
    sys.exit(0)
