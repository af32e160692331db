"""`upgrade --gate`: the gate's options are `up`'s (one definition), refused without --gate, and an upgrade with
--gate hands the candidate (the recipe now naming the new image, its release recording both versions) to the
gate instead of a plain `up`. The gate itself is tested in tests/bench/test_up_gate.py on the simulated cluster."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

import pytest
from typer.testing import CliRunner

from orchestrator.cli import upgrade_cmd
from orchestrator.cli.main import app
from orchestrator.deploy.upgrade import Upgrade


@pytest.mark.parametrize("command", [["up", "r.yaml"], ["upgrade", "r.yaml", "--image", "x:1"]])
def test_a_gate_option_without_gate_is_bad_input(command):
    result = CliRunner().invoke(app, [*command, "--profile", "code", "--shots", "3"])
    assert result.exit_code == 2, result.output
    assert "--profile, --shots only go with --gate" in result.output


def test_upgrade_with_gate_runs_the_gate_on_the_upgraded_recipe(monkeypatch, tmp_path):
    found = Upgrade(node="spark-1", recipe=tmp_path / "new.yaml", backup=None, old_image="sha256:" + "a" * 64,
                    new_image="sha256:" + "b" * 64, old_version="0.33.0", new_version="0.34.0", flags_checked=12)
    dep = SimpleNamespace(name="the upgraded deployment")
    monkeypatch.setattr(upgrade_cmd, "load_inventory", lambda path: (SimpleNamespace(nodes=[]), None))
    monkeypatch.setattr(upgrade_cmd, "prepare", lambda *args: (found, dep))
    calls = []
    monkeypatch.setattr(upgrade_cmd, "run_gate", lambda *args, **kw: calls.append((args, kw)))
    monkeypatch.setattr(upgrade_cmd, "run_up", lambda *a, **kw: pytest.fail("a plain up ran instead of the gate"))
    inventory = tmp_path / "inventory.yaml"
    result = CliRunner().invoke(app, ["upgrade", "r.yaml", "-i", str(inventory), "--image", "x:1", "--gate",
                                      "--profile", "code,zh", "--shots", "4", "--tolerance", "0.05"])
    assert result.exit_code == 0, result.output
    (args, kw), = calls
    assert args[0] is dep and Path(args[1]) == inventory
    assert args[2].upgrade == found.record()  # B's release records both vLLM versions
    assert kw == {"profile": "code,zh", "shots": 4, "tolerance": 0.05, "blocks": "ABAB", "max_tokens": 800,
                  "as_json": False}
