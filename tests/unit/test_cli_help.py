"""Every command's --help shows an example (issue 2), and the exit-code contract holds for usage errors."""

from __future__ import annotations

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.cli.main import app

COMMANDS = [["validate"], ["render"], ["pin"], ["up"], ["down"], ["status"], ["logs"], ["demo"],
            ["preflight"], ["fit"], ["bench"], ["schema"], ["history"], ["accept"], ["watch"], ["rollback"], ["restart"],
            ["lock"], ["audit"], ["prune"], ["setup"], ["upgrade"], ["tune"],
            ["sim", "up"], ["sim", "down"], ["sim", "fault"], ["sim", "ls"], ["sim", "images"], ["export", "k8s"]]


@pytest.mark.parametrize("command", COMMANDS, ids=" ".join)
def test_help_shows_an_example(command):
    result = CliRunner().invoke(app, [*command, "--help"])
    assert result.exit_code == 0, result.output
    assert "Example" in result.output


def test_every_registered_command_is_covered():
    group = typer.main.get_command(app)
    top = {name for name in group.list_commands(typer.Context(group))
           if not hasattr(group.get_command(typer.Context(group), name), "list_commands")}
    assert top == {c[0] for c in COMMANDS if len(c) == 1}


def test_unknown_option_is_bad_input():
    result = CliRunner().invoke(app, ["render", "orchestrator/sim/recipes/sim-tiny.yaml", "--bogus"])
    assert result.exit_code == 2


def test_sim_fault_help_lists_every_fault_kind():
    from orchestrator.sim.faults import KINDS

    result = CliRunner().invoke(app, ["sim", "fault", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0
    text = " ".join(result.output.split()).replace("- ", "-")  # help text wraps at hyphens
    assert [k for k in KINDS if k not in text] == []
