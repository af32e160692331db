"""-q / default / -v, said once for every command: the terminal sink shows `-q` only what failed, by default a
phase's checks summed up on its end line (those that warn or fail in full, the skipped ones named), with `-v`
every check line; the JSON sink gets every event whatever the level. The options are on every command and
set the level for that invocation only."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.cli.reference import walk_commands
from orchestrator.runner.events import Events, Phase
from orchestrator.runner.sinks import JsonSink, TerminalSink
from orchestrator.verbosity import Verbosity, level, set_level

REPO = Path(__file__).resolve().parents[2]
RENDER = ["render", str(REPO / "recipes/dspark-0731-b12x.yaml"), "-i", str(REPO / "inventory.yaml")]


def _up_like(verbosity: Verbosity, fail: bool = False) -> tuple[list[str], list[dict]]:
    """A preflight of 30 checks (27 ok, 2 skip, 1 warn), a head phase with a container, and a ready phase that
    fails when asked: what the terminal prints at this verbosity, and what the JSON sink got."""
    screen, stream = io.StringIO(), io.StringIO()
    events = Events(TerminalSink(Console(file=screen, width=300, highlight=False), verbosity), JsonSink(stream))
    with events.phase(Phase.PREFLIGHT):
        for n in range(27):
            events.check(f"check-{n}", "ok", {"spark-1": "fine"}, "spark-1: fine")
        events.check("model-fit", "skip", {"spark-1": "no snapshot"}, "spark-1: no snapshot")
        events.check("jit-cache", "skip", {"spark-1": "empty"}, "spark-1: empty")
        events.check("swap", "warn", {"spark-2": "8 GiB swap"}, "spark-2: 8 GiB swap")
    with events.phase(Phase.HEAD):
        events.note("waiting for the head's port")
        events.warn("clock skew 2 s", node="spark-2")
    try:
        with events.phase(Phase.READY):
            events.check("completion", "fail" if fail else "ok", {"spark-1": "500"}, "spark-1: 500")
            if fail:
                raise RuntimeError("not ready")
    except RuntimeError:
        pass
    events.close()
    return screen.getvalue().splitlines(), [json.loads(line) for line in stream.getvalue().splitlines()]


def test_default_sums_up_a_phases_checks_on_its_end_line_and_shows_what_warns():
    lines, said = _up_like(Verbosity.NORMAL)
    assert not any(line.startswith("  check-") for line in lines)
    end = next(line for line in lines if line.startswith("✓ preflight"))
    assert end.endswith("— 30 checks: 27 ok, 2 skip (model-fit, jit-cache), 1 warn"), end
    assert "  swap: warn — spark-2: 8 GiB swap" in lines
    assert "  warning: spark-2: clock skew 2 s" in lines and "  waiting for the head's port" in lines
    assert next(line for line in lines if line.startswith("✓ ready")).endswith("— 1 check ok")
    assert len(lines) < 12, lines
    assert sum(1 for e in said if e["event"] == "check") == 31  # --json: every event, whatever the terminal


def test_verbose_says_every_check_line():
    lines, _ = _up_like(Verbosity.VERBOSE)
    assert [line for line in lines if line.startswith("  check-")] == [
        f"  check-{n}: ok — spark-1: fine" for n in range(27)]
    assert "  model-fit: skip — spark-1: no snapshot" in lines


def test_quiet_says_only_what_failed():
    assert _up_like(Verbosity.QUIET)[0] == []
    lines, _ = _up_like(Verbosity.QUIET, fail=True)
    assert lines[0] == "  completion: fail — spark-1: 500"
    assert lines[1].startswith("✗ ready") and lines[1].endswith("— 1 check: 1 fail")
    assert len(lines) == 2


def test_every_command_takes_q_and_v():
    root = __import__("typer").main.get_command(app)
    for path, command in walk_commands(root):
        names = {opt for p in command.params for opt in p.opts}
        assert {"-q", "--quiet", "-v", "--verbose"} <= names, path


def test_the_options_set_the_level_for_one_invocation_and_both_are_refused():
    runner = CliRunner()
    quiet = runner.invoke(app, [*RENDER, "-q", "--node", "spark-2"])
    assert quiet.exit_code == 0 and "plan " not in quiet.stderr and quiet.stdout.startswith("# spark-2")
    assert level() is Verbosity.QUIET
    plain = runner.invoke(app, [*RENDER, "--node", "spark-2"])
    assert plain.exit_code == 0 and plain.stderr.startswith("plan ") and level() is Verbosity.NORMAL
    both = runner.invoke(app, [*RENDER, "-q", "-v"])
    assert both.exit_code == 2 and "give -q or -v, not both" in both.stderr and both.stdout == ""


@pytest.fixture(autouse=True)
def _normal():
    yield
    set_level(Verbosity.NORMAL)
