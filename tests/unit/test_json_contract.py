"""Issue 39, acceptance 3 (the output contract): every command's `--json` is one envelope
{"ok", "result", "error"} that validates against the JSON Schema shipped in the package.

The commands are enumerated from the typer app, so a new one is held too: each must have a run here
(offline, successful: the files, the Hub stand-in) or on the shared sim cluster (tests/integration/
test_json_contract_cluster.py, its list in tests/cli_json.py). Every command's failure envelope is held by
tests/unit/test_cli_conventions.py::test_json_is_all_stdout_holds (same walk). Here also: the error object
takes file/line/key and the fix from a config issue, the node from a node error, and an event stream ends
with the envelope (its `result` event folded in)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
from jsonschema import Draft202012Validator
from typer.testing import CliRunner

import cli_json
from fakes import INVENTORY, _dump, sim_recipe
from orchestrator.cli import json_contract
from orchestrator.cli.common import Failed, JsonLines, emit_json, exit_codes
from orchestrator.cli.main import app
from orchestrator.cli.reference import walk_commands
from orchestrator.runner.events import Events, Phase
from orchestrator.runner.sinks import JsonSink

REPO = Path(__file__).resolve().parents[2]
IMPORTS = REPO / "tests" / "data" / "import"
COMMANDS = dict(walk_commands(typer.main.get_command(app)))


def test_the_shipped_schema_is_a_valid_draft_2020_12_schema():
    Draft202012Validator.check_schema(json_contract.schema())
    assert (REPO / "orchestrator" / "cli" / json_contract.SCHEMA_FILE).is_file()  # package data: ships as is


def test_every_command_has_a_json_run_beyond_the_refused_input():
    """A command added later fails here until its --json is run offline here or on the cluster."""
    held = set(UNIT_OK) | set(cli_json.CLUSTER_RUNS)
    assert set(COMMANDS) - held == set(), "add a --json run for these commands (here or in cli_json.CLUSTER_RUNS)"
    assert held - set(COMMANDS) == set(), "commands that no longer exist"


@pytest.fixture
def files(tmp_path, monkeypatch):
    """A pinned sim recipe and a 2-node inventory whose key and known_hosts exist (validate reads them)."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    key, known = home / ".ssh" / "id_ed25519", home / ".ssh" / "known_hosts"
    key.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()))
    key.chmod(0o600)
    known.write_text("")
    inventory = json.loads(json.dumps(INVENTORY))
    inventory["ssh"].update(key=str(key), known_hosts=str(known))
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / "config"))
    return _dump(sim_recipe(), tmp_path / "recipe.yaml"), _dump(inventory, tmp_path / "inventory.yaml")


def _run(*argv: str, env: dict | None = None) -> tuple[int, dict]:
    got = CliRunner().invoke(app, [*argv, "--json"], env=env)
    return got.exit_code, cli_json.envelope(got.stdout)


def _fit(recipe: Path, inventory: Path) -> tuple[int, dict]:
    from orchestrator.sim import fake_big
    from orchestrator.sim.hub import HubStandIn

    big = fake_big.repo("sim/big-83", 83)
    text = recipe.read_text().replace("repo: sim/tiny-moe", f"repo: {big.repo_id}")
    recipe.write_text(text.replace("gpu_memory_utilization: 0.7", "gpu_memory_utilization: 0.8"))
    with HubStandIn([big], host="127.0.0.1") as hub:
        return _run("fit", str(recipe), "--memory", "119.7GiB",
                    env={"HF_ENDPOINT": hub.endpoint("127.0.0.1"), "HF_TOKEN": "", "HF_HUB_DISABLE_TELEMETRY": "1"})


UNIT_OK = {
    ("validate",): lambda r, i: _run("validate", str(r), "-i", str(i)),
    ("render",): lambda r, i: _run("render", str(r), "-i", str(i)),
    ("schema",): lambda r, i: _run("schema", "inventory"),
    ("recipe", "import"): lambda r, i: _run("recipe", "import", str(IMPORTS / "eugr-minimax-m2-awq.yaml")),
    ("export", "k8s"): lambda r, i: _run("export", "k8s", str(r), "-i", str(i), "--image-ref",
                                                 "registry.example/vllm@sha256:" + "b" * 64),
    ("fit",): _fit,
}


@pytest.mark.parametrize("path", UNIT_OK, ids=[" ".join(p) for p in UNIT_OK])
def test_a_successful_run_is_one_valid_envelope(path, files):
    code, doc = UNIT_OK[path](*files)
    assert code == 0 and doc["ok"] is True and doc["error"] is None, doc
    assert doc["result"] is not None


def test_render_numbers_are_numbers(files):
    _, doc = _run("render", str(files[0]), "-i", str(files[1]))
    assert [r["rank"] for r in doc["result"]] == [0, 1]


def test_a_bad_recipe_value_names_file_line_key_and_fix(files):
    recipe, inventory = files
    text = recipe.read_text()
    recipe.write_text(text.replace("gpu_memory_utilization: 0.7", "gpu_memory_utilization: 7"))
    code, doc = _run("validate", str(recipe), "-i", str(inventory))
    error = doc["error"]
    line = next(n for n, t in enumerate(recipe.read_text().splitlines(), 1) if "gpu_memory_utilization" in t)
    assert code == 2 and doc["ok"] is False and error["code"] == "bad-input" and error["exit_code"] == 2
    assert (error["file"], error["line"], error["key"]) == (str(recipe), line, "vllm.gpu_memory_utilization")
    assert error["message"] and "; fix: " not in error["message"] and error["node"] is None


def test_a_bad_override_is_located_on_the_command_line(files):
    recipe, inventory = files
    code, doc = _run("validate", str(recipe), "-i", str(inventory), "--set", "vllm.max_model_len=lots")
    assert code == 2 and doc["error"]["file"] == "--set vllm.max_model_len" and doc["error"]["line"] is None
    assert doc["error"]["key"] == "vllm.max_model_len"


def test_the_error_names_the_one_node_a_failure_came_from(capsys):
    from orchestrator.transport.node import NodeError

    with pytest.raises(typer.Exit):
        with exit_codes(as_json=True):
            try:
                raise NodeError("spark-2", "docker is not running")
            except NodeError as exc:
                raise Failed(f"preflight: {exc}; fix: start docker on spark-2") from exc
    doc = cli_json.envelope(capsys.readouterr().out)
    assert doc["error"]["node"] == "spark-2" and doc["error"]["code"] == "failed"
    assert doc["error"]["fix"] == "start docker on spark-2"


def test_an_event_stream_ends_with_the_envelope_holding_its_result(capsys):
    with pytest.raises(typer.Exit):
        with exit_codes(as_json=True):
            events = Events(JsonSink(JsonLines()))
            with events.phase(Phase.CONNECT):
                events.warn("slow", node="spark-2")
            events.result(False, phase="ready", nodes=["spark-2"], error="not ready")
            events.close()
            raise Failed("ready: spark-2 did not answer")
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines()]
    assert not any(line.get("event") == "result" for line in lines)
    doc = cli_json.envelope(out)
    assert doc == lines[-1] and doc["ok"] is False and doc["result"]["phase"] == "ready"
    assert doc["error"]["message"] == "ready: spark-2 did not answer" and doc["error"]["code"] == "failed"
    assert cli_json.events(out) == lines[:-1] and lines[:-1]


def test_times_are_iso_with_zone_and_a_result_that_says_failed_is_a_failure(capsys):
    with exit_codes(as_json=True):
        emit_json({"ok": False, "at": 1_700_000_000.5, "started_at": 1_700_000_000, "finished_at": None,
                   "problems": ["rank 1 is gone"]})
    doc = cli_json.envelope(capsys.readouterr().out)
    assert doc["result"]["at"] == "2023-11-14T22:13:20.500000+00:00"
    assert doc["result"]["started_at"] == "2023-11-14T22:13:20+00:00" and doc["result"]["finished_at"] is None
    assert doc["ok"] is False and doc["error"]["message"] == "rank 1 is gone"


def test_an_interrupt_is_its_own_code(capsys):
    with pytest.raises(typer.Exit) as ended:
        with exit_codes(as_json=True):
            raise KeyboardInterrupt
    assert ended.value.exit_code == 130
    doc = cli_json.envelope(capsys.readouterr().out)
    assert doc["error"]["code"] == "interrupted" and doc["error"]["exit_code"] == 130


def test_status_judges_ranks_as_numbers():
    from orchestrator.deploy.status import ContainerRow, judge

    rows = [ContainerRow("spark-1", "sd-r0", "running", "", "sha256:1", "r", "d", "p", 0, 2, 8000, "m")]
    (state,) = judge(rows, {"spark-2": "unreachable"})
    assert state.problems == ["rank 1 has no container (unreachable: spark-2)"]


@pytest.mark.parametrize("path", COMMANDS, ids=[" ".join(p) for p in COMMANDS])
def test_a_command_line_mistake_is_an_envelope_too(path):
    """click refuses it before the command runs: with --json, stdout still holds the one envelope."""
    got = CliRunner().invoke(app, [*path, "--no-such-option", "--json"])
    doc = cli_json.envelope(got.stdout)
    assert got.exit_code == 2 and doc["error"]["code"] == "bad-input" and doc["error"]["exit_code"] == 2
    assert "--no-such-option" in doc["error"]["message"] and "error: No such option" in got.stderr
