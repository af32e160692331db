"""Issue 22, acceptance 3: one convention for EVERY registered command, found by walking the CLI itself (a
command added later is held to it without touching this file, unless it lacks -i and needs offline args).

Each command: `-h` works; its help shows examples one per line and readable metavars; it has `--json`,
and run with `--json` against a node that accepts TCP and closes it (or with an input that is refused)
its stdout is the one envelope of the JSON contract (validated by its JSON Schema) and nothing else, with exit
code 0, 1 or 2; `-c` beside every `-i`; one option name
means one kind of value everywhere; `--yes` means "do not ask" and `--force` names the one refusal it
overrides.
"""

from __future__ import annotations

import json
import re
import socket
import threading
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

import cli_json
from orchestrator.cli.common import Refusal
from orchestrator.cli.main import app
from orchestrator.cli.reference import walk_commands

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "orchestrator" / "sim" / "recipes" / "sim-tiny.yaml"
GOOD_INVENTORY = Path(__file__).parent / "corpus" / "good-inventory.yaml"


ROOT = typer.main.get_command(app)
COMMANDS = dict(walk_commands(ROOT))
IDS = [" ".join(p) for p in COMMANDS]

# Commands without -i: arguments that make them end at once, offline, in a way they must report in JSON.
NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/docker.sock"}
OFFLINE = {
    ("sim", "up"): (["--load-image-on", "x"], {}),
    ("sim", "down"): (["--name", "Not A Name!"], {}),
    ("sim", "fault"): (["1", "partition", "--name", "Not A Name!"], {}),
    ("sim", "ls"): ([], NO_DOCKER),
    ("sim", "images"): ([], NO_DOCKER),
    ("demo",): (["--name", "Not A Name!"], {}),
    ("setup",): (["10.0.0.1", "10.0.0.1"], {}),  # a host given twice: bad input before any connection
    ("schema",): (["recipe"], {}),  # reads the models only
    ("recipe", "import"): (["/nonexistent/peer.yaml"], {}),  # bad input: the file is not there
    ("tune",): (["recipe.yaml", "--set", "no-equals-sign"], {}),  # a bad --set: bad input before any file is read
}
# One name, two kinds of value, on purpose: each says why.
SAME_NAME_OTHER_VALUE = {
    "--output": "setup writes an inventory FILE, export k8s a directory of manifests, recipe import a recipe FILE",
    "-o": "the short form of --output",
    "-n": "sim's --name NAME; export k8s's --namespace, as kubectl spells it",
    "--set": "one value per key where a recipe is deployed or checked (KEY=VALUE); the values to try in tune",
}


def _options(command) -> dict[str, object]:
    return {opt: p for p in command.params for opt in getattr(p, "opts", []) if opt.startswith("-")}


def _help(path) -> str:
    result = CliRunner().invoke(app, [*path, "-h"], env={"COLUMNS": "120"})
    assert result.exit_code == 0, result.output
    return result.stdout


def test_version():
    result = CliRunner().invoke(app, ["--version"])
    assert result.exit_code == 0 and re.fullmatch(r"spark-deploy \S+\n", result.stdout), result.stdout


def test_root_help_offers_completion_and_h():
    text = _help(())
    assert "--install-completion" in text and "-h, --help" in text and "--version" in text


def test_the_walk_found_every_command():
    assert {("up",), ("down",), ("validate",), ("boot", "enable"), ("maintenance", "end"), ("sim", "fault")} <= set(
        COMMANDS)
    assert len(COMMANDS) >= 25


@pytest.mark.parametrize("path", COMMANDS, ids=IDS)
def test_help_is_readable(path):
    text = _help(path)
    assert text.startswith("Usage: spark-deploy " + " ".join(path))
    assert not re.search(r"<[\w\[\], |.]+>|\{\w+\}", text), f"typer's metavars in:\n{text}"
    examples = [line.strip() for line in text.splitlines() if "Example" in line]
    assert examples, "no example"
    for line in examples:  # one example per line, each a whole command
        assert line.startswith("Example: spark-deploy ") and line.count("spark-deploy ") == 1, line


@pytest.mark.parametrize("path", COMMANDS, ids=IDS)
def test_options_follow_the_convention(path):
    opts = _options(COMMANDS[path])
    assert "--json" in opts
    assert "-h" in opts or "-h" in ROOT.context_settings.get("help_option_names", [])
    if "--inventory" in opts:
        assert "--cluster" in opts and "-c" in opts and "-i" in opts
    if "--yes" in opts:
        assert opts["--yes"].help.startswith("Do not ask")
    if "--force" in opts:
        named = re.match(r"Override the '([\w-]+)' refusal: ", opts["--force"].help)
        assert named and named.group(1) in {r.value for r in Refusal}, opts["--force"].help


def test_one_option_name_is_one_kind_of_value():
    kinds: dict[str, set] = {}
    for command in COMMANDS.values():
        for opt, param in _options(command).items():
            kind = "flag" if getattr(param, "is_flag", False) else (param.metavar, param.multiple)
            kinds.setdefault(opt, set()).add(kind)
    assert {opt: k for opt, k in kinds.items() if len(k) > 1 and opt not in SAME_NAME_OTHER_VALUE} == {}
    assert kinds["--tail"] == {("N", False)}


@pytest.fixture(scope="module")
def closing_server():
    """A TCP server on loopback that accepts every connection and closes it at once."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(64)
    stop = threading.Event()

    def serve():
        while not stop.is_set():
            try:
                conn, _ = server.accept()
            except OSError:
                return
            conn.close()

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    yield server.getsockname()[1]
    stop.set()
    server.close()


@pytest.fixture(scope="module")
def offline(tmp_path_factory, closing_server):
    """An inventory whose nodes accept TCP and close it during the SSH handshake, with a real key and
    known_hosts so every local check passes."""
    from cryptography.hazmat.primitives import serialization
    from cryptography.hazmat.primitives.asymmetric import ed25519

    home = tmp_path_factory.mktemp("home")
    (home / ".ssh").mkdir()
    key = home / ".ssh" / "id_ed25519"
    key.write_bytes(ed25519.Ed25519PrivateKey.generate().private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, serialization.NoEncryption()))
    key.chmod(0o600)
    (home / ".ssh" / "known_hosts").write_text("")
    text = GOOD_INVENTORY.read_text().replace("port: 22", f"port: {closing_server}\n  key: {key}\n  known_hosts: "
                                                          f"{home / '.ssh' / 'known_hosts'}")
    text = text.replace("10.0.0.1", "127.0.0.1").replace("10.0.0.2", "localhost")  # two names, one server
    inventory = home / "inventory.yaml"
    inventory.write_text(text)
    return {"HOME": str(home), "XDG_CONFIG_HOME": str(home / "config"), "SPARK_DEPLOY_INVENTORY": "",
            "COLUMNS": "200"}, inventory


@pytest.mark.parametrize("path", COMMANDS, ids=IDS)
def test_json_is_all_stdout_holds(path, offline):
    env, inventory = offline
    command = COMMANDS[path]
    opts = _options(command)
    if path in OFFLINE:
        args, extra_env = OFFLINE[path]
    else:
        assert "--inventory" in opts, f"{' '.join(path)} has no -i: add offline arguments to OFFLINE"
        recipe = [str(RECIPE)] if any(p.name == "recipe" and p.required for p in command.params) else []
        args, extra_env = [*recipe, "-i", str(inventory)], {}
    result = CliRunner().invoke(app, [*path, *args, "--json"], env={**env, **extra_env})
    assert result.exit_code in (0, 1, 2), (result.exit_code, result.stderr)
    assert result.stdout.strip(), f"nothing on stdout; stderr: {result.stderr}"
    doc = cli_json.envelope(result.stdout)  # the contract's JSON Schema, the stream's lines, the times
    assert doc["ok"] is (result.exit_code == 0), doc
    if result.exit_code:
        assert doc["error"]["exit_code"] == result.exit_code, doc
    assert "Traceback" not in result.stderr, result.stderr


def test_a_handshake_closed_by_the_node_is_one_line_naming_node_and_address(offline):
    env, inventory = offline
    result = CliRunner().invoke(app, ["status", "-i", str(inventory)], env=env)
    assert result.exit_code == 1
    assert "Traceback" not in result.stderr and "paramiko" not in result.stderr
    assert len(result.stderr.strip().splitlines()) == 1, result.stderr
    assert "no node of corpus-pair does" in result.stderr  # status says nothing answered, not an empty table
    assert re.search(r"node-a: spark@127\.0\.0\.1:\d+ accepted the connection, then (closed|reset) it during the SSH "
                     r"handshake", result.stderr), result.stderr


def test_shell_completion_completes_commands_and_options():
    """What `--install-completion` installs calls back into the CLI; that answer is held here."""
    def complete(words: str, cword: int) -> list[str]:
        result = CliRunner().invoke(app, [], prog_name="spark-deploy", env={
            "_SPARK_DEPLOY_COMPLETE": "complete_bash", "COMP_WORDS": words, "COMP_CWORD": str(cword)})
        return result.stdout.split()

    assert complete("spark-deploy ma", 1) == ["maintenance"]
    assert "--cluster" in complete("spark-deploy status --c", 2)


@pytest.mark.parametrize("stream, said", [
    ([{"event": "phase_start", "phase": "connect"}], None),  # the stream ended early: the error is its last line
    ([{"event": "result", "ok": False, "error": "up failed"}], {"error": "up failed"}),  # its result, folded in
])
def test_an_event_stream_ends_in_a_failed_object(stream, said, capsys):
    from orchestrator.cli.common import Failed, JsonLines, exit_codes

    with pytest.raises(typer.Exit):
        with exit_codes(as_json=True):
            for event in stream:
                JsonLines().write(json.dumps(event) + "\n")
            raise Failed("spark-2: unreachable")
    out = capsys.readouterr().out
    lines = [json.loads(line) for line in out.splitlines()]
    events = [e for e in stream if e["event"] != "result"]
    assert lines[:-1] == events and cli_json.events(out) == events
    assert lines[-1]["ok"] is False and lines[-1]["result"] == said
    assert lines[-1]["error"]["message"] == "spark-2: unreachable" and lines[-1]["error"]["exit_code"] == 1
