"""Issue 22, acceptance 2 (`validate` in under a second): commands are imported when used (cli/lazy.py).

The top-level help reads each command's first sentence from its source; it must be what the loaded
command says. `validate` must not import what only the cluster commands need.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import typer

from orchestrator.cli.main import COMMANDS, app

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent / "corpus"


@pytest.mark.parametrize("name", list(COMMANDS.lazy))
def test_the_short_help_read_without_importing_is_the_loaded_commands(name):
    group = typer.main.get_command(app)
    loaded = group.get_command(typer.Context(group), name)
    assert loaded is not None and loaded.name == name
    for limit in (45, 60):
        assert COMMANDS.lazy[name].short_help(limit) == loaded.get_short_help_str(limit)
    assert COMMANDS.lazy[name].short_help(60), f"{name} has no help"


PROBE = """
import json, sys
from orchestrator.cli.main import app
try:
    app(sys.argv[1:], prog_name="spark-deploy")
except SystemExit as exc:
    code = exc.code
print(json.dumps({"code": code, "modules": sorted(sys.modules)}), file=sys.__stderr__)
"""

HEAVY = ("paramiko", "orchestrator.deploy", "orchestrator.operation", "orchestrator.bench", "orchestrator.sim",
         "orchestrator.transport", "httpx", "jinja2", "orchestrator.cli.deploy_cmds")


def _imported(argv: list[str], tmp_path) -> tuple[int, list[str]]:
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, exist_ok=True)
    (home / ".ssh" / "known_hosts").write_text("")
    done = subprocess.run([sys.executable, "-c", PROBE, *argv], capture_output=True, text=True, cwd=REPO,
                          env={"HOME": str(home), "PATH": "/usr/bin:/bin"}, timeout=60)
    report = json.loads(done.stderr.strip().splitlines()[-1])
    return report["code"], report["modules"]


@pytest.mark.parametrize("argv", [
    ["validate", str(CORPUS / "r-vllm-flag-typo.yaml"), "-i", str(CORPUS / "good-inventory.yaml")],
    ["--help"],
], ids=["validate", "help"])
def test_validate_and_help_import_no_cluster_machinery(argv, tmp_path):
    code, modules = _imported(argv, tmp_path)
    assert code == (2 if argv[0] == "validate" else 0)
    heavy = [m for m in modules if m.startswith(HEAVY)]
    assert heavy == [], f"`spark-deploy {argv[0]}` imported {heavy[:8]}"
    if argv[0] == "validate":
        assert "orchestrator.cli.config_cmds" in modules and "orchestrator.cli.release_cmds" not in modules


def test_a_mistyped_command_is_bad_input_naming_the_one_meant():
    from typer.testing import CliRunner

    result = CliRunner().invoke(app, ["valdate"])
    assert result.exit_code == 2
    assert "No such command 'valdate'. Did you mean 'validate'?" in result.output
