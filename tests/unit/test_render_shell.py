"""`render`'s text: one argument per line, `\\`-continued, and bash reads back exactly the argv (any token:
quotes, spaces, newlines, `$`, backslashes, leading dashes); `--one-line` is the one-line form."""

from __future__ import annotations

import shlex
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

import cli_json
from orchestrator.cli.main import app
from orchestrator.render.shell import argument_lines, continued
from shell_words import shell_words

REPO = Path(__file__).resolve().parents[2]
RECIPE, INVENTORY = str(REPO / "recipes/dspark-0731-b12x.yaml"), str(REPO / "inventory.yaml")


def test_options_share_a_line_with_their_value_and_nothing_else_does():
    argv = ["docker", "run", "--detach", "--name", "sd-x", "--env", "A=b c", "img@sha256:1", "org/model",
            "--port", "8000", "--enforce-eager", "--flag=-1", "--headless"]
    assert argument_lines(argv) == [["docker", "run"], ["--detach"], ["--name", "sd-x"], ["--env", "A=b c"],
                                    ["img@sha256:1"], ["org/model"], ["--port", "8000"], ["--enforce-eager"],
                                    ["--flag=-1"], ["--headless"]]
    text = continued(argv)
    assert text.splitlines()[3] == "  --env 'A=b c' \\"
    assert not text.endswith("\\")


_TOKEN = st.text(st.sampled_from(list("ab-=$'\"\\ \t\n`*;|&{}")), min_size=0, max_size=8)


@settings(max_examples=150, deadline=None)
@given(st.lists(_TOKEN, max_size=12))
def test_bash_reads_back_the_argv_whatever_its_tokens(tokens):
    argv = ["docker", "run", *tokens]
    assert shell_words(continued(argv)) == argv
    assert sum(argument_lines(argv), []) == argv  # the lines cut the argv, never change it


def test_the_cli_prints_one_argument_per_line_that_a_shell_reads_as_the_json_argv():
    plan = cli_json.result(CliRunner().invoke(app, ["render", RECIPE, "-i", INVENTORY, "--json"]).stdout)
    text = CliRunner().invoke(app, ["render", RECIPE, "-i", INVENTORY, "--node", "spark-2"]).stdout
    lines = text.splitlines()
    assert lines[0].startswith("# spark-2: rank 1") and lines[1] == "docker run \\"
    command = "\n".join(lines[1:lines.index("", 1)])
    assert len(command.splitlines()) > 40 and max(len(line) for line in command.splitlines()) < 120
    assert shell_words(command) == plan[1]["argv"]
    assert plan[1]["printed"] == shlex.join(plan[1]["argv"])  # --json keeps its one-line form


def test_one_line_prints_each_command_on_one_line():
    plan = cli_json.result(CliRunner().invoke(app, ["render", RECIPE, "-i", INVENTORY, "--json"]).stdout)
    lines = CliRunner().invoke(app, ["render", RECIPE, "-i", INVENTORY, "--one-line"]).stdout.splitlines()
    assert [lines[1], lines[4]] == [entry["printed"] for entry in plan]
