"""Without the `sim` extra, `sim ...` and `demo` exit 2 with the install line; other commands still work."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli.main import app

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def no_docker_sdk(monkeypatch):
    """Make `import docker` fail as it does in an install without the extra."""
    for name in [m for m in sys.modules if m == "docker" or m.startswith("docker.")]:
        monkeypatch.delitem(sys.modules, name)
    monkeypatch.setitem(sys.modules, "docker", None)


@pytest.mark.parametrize("argv", [["sim", "ls"], ["sim", "up", "--nodes", "2"], ["demo"]], ids=" ".join)
def test_sim_commands_name_the_extra(no_docker_sdk, argv):
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2, result.output
    assert "spark-deploy[sim]" in result.output and "docker" in result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)


def test_other_commands_do_not_need_it(no_docker_sdk):
    # render, not validate: validate also checks this machine's known_hosts and HF_TOKEN
    # (tests/unit/test_example_inventory.py gives it both).
    result = CliRunner().invoke(app, ["render", str(REPO / "orchestrator/sim/recipes/sim-tiny.yaml"),
                                      "-i", str(REPO / "inventory.yaml")])
    assert result.exit_code == 0, result.output
