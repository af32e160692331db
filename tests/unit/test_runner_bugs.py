"""Issue 19 acceptance 4: a step that raises an exception the tool did not expect.

The message names the phase, the node and the exception (a KeyError's text is only the key, so the type
is named), says it is a bug and where the traceback is; the cause stays chained, and `--debug` (or
SPARK_DEPLOY_DEBUG=1) prints the traceback down to the step's own line, the failing node's included.
Without it, no traceback reaches the operator.
"""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from fakes import deployment
from orchestrator.cli import deploy_cmds
from orchestrator.cli.main import app
from orchestrator.runner.events import Events, Phase
from orchestrator.runner.runner import Runner, StepFailed
from orchestrator.transport.group import on_all


class Quiet:
    """An events sink that keeps nothing (the Runner's own behaviour is what is tested)."""

    def handle(self, event) -> None:
        pass


class PerNodeLookup:
    """A step whose per-node work has a bug on spark-2 only: a dict lookup of a key that is not there."""

    phase, detail = Phase.HEAD, "start the head"

    def run(self, ctx) -> None:
        def work(node: str):
            facts = {"spark-1": {"x": 1}, "spark-2": {}}[node]
            return facts["x"]  # KeyError on spark-2

        on_all(["spark-1", "spark-2"], work, name=lambda n: n)

    def undo(self, ctx) -> None:
        pass

    def leftover(self, ctx) -> list[str]:
        return []


def _run_buggy() -> StepFailed:
    with pytest.raises(StepFailed) as caught:
        Runner(Events(Quiet())).run([PerNodeLookup()], None)
    return caught.value


def test_the_message_names_phase_node_and_exception_and_keeps_the_cause():
    error = _run_buggy()
    text = str(error)
    assert text.startswith("during head: spark-2: unexpected KeyError: 'x' (a bug"), text
    assert "--debug" in text and "SPARK_DEPLOY_DEBUG=1" not in text.split("(a bug")[0]
    assert error.nodes == ["spark-2"] and error.phase is Phase.HEAD
    group = error.__cause__  # chained, not dropped: the per-node failure keeps its traceback
    assert isinstance(group.failures["spark-2"], KeyError)
    assert group.failures["spark-2"].__traceback__ is not None


@pytest.fixture
def buggy_up(monkeypatch, tmp_path):
    """`spark-deploy up` on a valid deployment whose run meets the bug above (no cluster needed)."""
    dep = deployment(tmp_path)
    monkeypatch.setattr(deploy_cmds, "load_deployment", lambda recipe, inventory, overrides=(): dep)

    def run_up(dep, events, opts, plan=None):
        raise _run_buggy()

    monkeypatch.setattr(deploy_cmds, "run_up", run_up)
    monkeypatch.delenv("SPARK_DEPLOY_DEBUG", raising=False)


@pytest.mark.parametrize("how", ["flag", "env"])
def test_debug_prints_the_traceback_down_to_the_steps_own_line(buggy_up, how, monkeypatch):
    args = ["--debug", "up", "r.yaml", "-i", "i.yaml"] if how == "flag" else ["up", "r.yaml", "-i", "i.yaml"]
    env = {"SPARK_DEPLOY_DEBUG": "1"} if how == "env" else {}
    result = CliRunner().invoke(app, args, env=env)
    assert result.exit_code == 1, result.output
    assert "Traceback (most recent call last)" in result.output
    assert 'return facts["x"]  # KeyError on spark-2' in result.output  # the step's own line
    assert "--- spark-2:" in result.output
    assert "failed: during head: spark-2: unexpected KeyError: 'x'" in result.output


def test_without_debug_the_operator_gets_the_message_and_no_traceback(buggy_up):
    result = CliRunner().invoke(app, ["up", "r.yaml", "-i", "i.yaml"])
    assert result.exit_code == 1
    assert "failed: during head: spark-2: unexpected KeyError: 'x'" in result.output
    assert "Traceback" not in result.output


def test_a_bug_outside_any_step_is_named_too(monkeypatch):
    """Raised before the Runner (here: while loading): still one line, exit 1, the traceback on --debug."""
    def broken(recipe, inventory, overrides=()):
        return {}["recipe"]

    monkeypatch.setattr(deploy_cmds, "load_deployment", broken)
    monkeypatch.delenv("SPARK_DEPLOY_DEBUG", raising=False)
    result = CliRunner().invoke(app, ["up", "r.yaml", "-i", "i.yaml"])
    assert result.exit_code == 1 and "Traceback" not in result.output
    assert "failed: unexpected KeyError: 'recipe' (a bug in spark-deploy" in result.output
    result = CliRunner().invoke(app, ["--debug", "up", "r.yaml", "-i", "i.yaml"])
    assert result.exit_code == 1 and 'return {}["recipe"]' in result.output


def test_debug_is_this_invocations_only(buggy_up):
    """`--debug` in one in-process invocation must not turn it on for the next (nor for this process's env)."""
    import os

    CliRunner().invoke(app, ["--debug", "up", "r.yaml", "-i", "i.yaml"])
    assert "SPARK_DEPLOY_DEBUG" not in os.environ
    result = CliRunner().invoke(app, ["up", "r.yaml", "-i", "i.yaml"])
    assert result.exit_code == 1 and "Traceback" not in result.output
