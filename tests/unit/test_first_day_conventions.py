"""Small conventions a first day runs into: `-y` wherever `--yes` is (every command, found by walking the CLI),
one `error:` prefix (click's own usage errors included), `setup --user` defaulting to the local user name as
ssh does (never root, and never frozen into the help), and `down` saying which releases' kept containers it
removed (a rollback to them re-creates them)."""

from __future__ import annotations

import getpass

import pytest
import typer
from typer.testing import CliRunner

from orchestrator.cli import setup_cmd
from orchestrator.cli.common import BadInput
from orchestrator.cli.main import app
from orchestrator.cli.reference import walk_commands
from orchestrator.deploy import down as down_mod

from memnode import connector
from memnode.harness import MemCluster

COMMANDS = dict(walk_commands(typer.main.get_command(app)))


def test_every_yes_has_its_short_form():
    with_yes = {" ".join(path): p.opts for path, cmd in COMMANDS.items() for p in cmd.params
                if "--yes" in getattr(p, "opts", [])}
    assert {"setup", "down", "rollback"} <= set(with_yes)
    assert {name: opts for name, opts in with_yes.items() if "-y" not in opts} == {}


@pytest.mark.parametrize("argv", [["model", "pull"], ["up", "--no-such-option", "r.yaml"], ["no-such-command"],
                                  ["validate", "r.yaml", "--set"]])
def test_command_line_mistakes_say_error_in_lower_case(argv):
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 2
    assert "\nerror: " in "\n" + result.stderr and "Error:" not in result.stderr, result.stderr


def test_setup_user_is_the_local_user_when_it_runs(monkeypatch):
    from orchestrator.setup import run as setup_run

    seen = {}

    def run(opts, prompts):  # setup's work itself is tested on the simulated nodes (test_setup.py)
        seen["user"] = opts.user
        raise setup_run.SetupFailed("stopped here")

    monkeypatch.setattr(setup_run, "run", run)
    monkeypatch.setattr(getpass, "getuser", lambda: "nvidia")
    result = CliRunner().invoke(app, ["setup", "10.0.0.1", "-y", "--fingerprint", "10.0.0.1=SHA256:x"])
    assert seen == {"user": "nvidia"} and result.exit_code == 1, result.output
    help_text = " ".join(CliRunner().invoke(app, ["setup", "-h"]).stdout.split())
    assert "(default: your user name here, as ssh does;" in help_text and "default: root" not in help_text


def test_setup_without_a_local_user_name_asks_for_user(monkeypatch):
    def nobody():
        raise OSError("No username set in the environment")

    monkeypatch.setattr(getpass, "getuser", nobody)
    with pytest.raises(BadInput, match="give --user NAME"):
        setup_cmd.local_user()


@pytest.fixture
def mem(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    return MemCluster(tmp_path)


def longer(recipe: dict) -> None:
    recipe["vllm"]["max_model_len"] = 2048


def test_down_names_the_releases_whose_kept_containers_it_removed(mem):
    mem.up()  # release 1
    mem.up(mem.deployment(longer))  # release 2 serves, release 1's containers kept (stopped)
    result = down_mod.down(mem.inventory, None, mem.events, connector=connector(mem.world))
    assert result.ok
    assert {k: sorted(v) for k, v in result.recreate.items()} == {1: ["spark-1", "spark-2"]}
    note = down_mod.recreate_note(result.recreate)
    assert note.startswith("removed the kept containers of release 1 (on spark-")
    assert "`spark-deploy rollback 1`" in note and "re-create" in note


def test_down_of_only_the_serving_release_has_nothing_to_say(mem):
    mem.up()
    result = down_mod.down(mem.inventory, None, mem.events, connector=connector(mem.world))
    assert result.ok and result.removed and result.recreate == {} and down_mod.recreate_note({}) == ""
