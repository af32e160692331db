"""docs/cli.md is generated from the CLI (orchestrator/cli/reference.py): it fails here when they drift.
Regenerate with `python -m orchestrator.cli.reference > docs/cli.md`."""

from __future__ import annotations

from pathlib import Path

from orchestrator.cli.reference import render_reference

PAGE = Path(__file__).resolve().parents[2] / "docs" / "cli.md"


def test_docs_cli_md_is_what_the_cli_says():
    assert PAGE.read_text() == render_reference(), (
        "docs/cli.md differs from the CLI: run `python -m orchestrator.cli.reference > docs/cli.md`")


def test_the_page_names_every_command_option_and_exit_code():
    page = render_reference()
    for needle in ("### spark-deploy down", "`--all`", "### spark-deploy maintenance end", "`blocking-changes`",
                   "| 2 | bad input", "`--cluster`, `-c`", "`--tail` | `N`", "XDG_CONFIG_HOME"):
        assert needle in page, needle
