"""Acceptance 3 (issue #2): every broken recipe or inventory is refused with exit 2, and stderr names
the file, the exact line and the key, with no traceback and without opening a single connection.

The cases live in tests/unit/corpus/ and their expectations in tests/unit/corpus/expected.yaml.
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import paramiko
import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner

from orchestrator.cli.main import app
from cli_zygote import run_cli

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent / "corpus"
GOOD_INVENTORY = CORPUS / "good-inventory.yaml"
GOOD_RECIPE = REPO / "orchestrator" / "sim" / "recipes" / "sim-tiny.yaml"
CASES = YAML(typ="safe").load((CORPUS / "expected.yaml").read_text(encoding="utf-8"))["cases"]
LITERAL_SECRET = "hf_CorpusLiteralValue0123456789"  # the token the secret cases write inline


def files_for(case: dict) -> tuple[Path, Path, Path]:
    """(recipe, inventory, the broken one of the two): the other side is the known-good partner."""
    broken = CORPUS / case["file"]
    if case["file"].startswith("r-"):
        return broken, GOOD_INVENTORY, broken
    return GOOD_RECIPE, broken, broken


@pytest.fixture(autouse=True)
def controller(tmp_path, monkeypatch) -> Path:
    """This machine as `validate` sees it: a HOME whose ~/.ssh/known_hosts exists (the good inventory sets
    no ssh.known_hosts), the one secret the corpus sets, and not the one it expects to be missing."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True, mode=0o700)
    (home / ".ssh" / "known_hosts").write_text("")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("SPARK_DEPLOY_CORPUS_SET_SECRET", "set")
    monkeypatch.delenv("SPARK_DEPLOY_CORPUS_UNSET_SECRET", raising=False)
    return home


@pytest.fixture
def network_attempts(monkeypatch) -> list:
    """Every way this code base could reach a node or a daemon records the attempt and fails it."""
    attempts: list = []

    def refuse(what: str):
        def refused(*args, **kwargs):
            attempts.append((what, args, kwargs))
            raise OSError(f"network use refused in this test ({what})")
        return refused

    monkeypatch.setattr(socket.socket, "connect", refuse("socket.connect"))
    monkeypatch.setattr(socket.socket, "connect_ex", refuse("socket.connect_ex"))
    monkeypatch.setattr(socket, "create_connection", refuse("socket.create_connection"))
    monkeypatch.setattr(socket, "getaddrinfo", refuse("socket.getaddrinfo"))
    monkeypatch.setattr(paramiko.SSHClient, "connect", refuse("paramiko.SSHClient.connect"))
    monkeypatch.setattr(subprocess, "Popen", refuse("subprocess.Popen"))  # e.g. an `ssh` child
    return attempts


def validate(recipe: Path, inventory: Path):
    return CliRunner().invoke(app, ["validate", str(recipe), "-i", str(inventory)])


def test_the_network_guard_catches_connections(network_attempts):
    """The guard is what makes the no-connection assertions mean something, so prove it bites."""
    with pytest.raises(OSError):
        socket.create_connection(("192.0.2.1", 22), timeout=0.1)
    with socket.socket() as sock, pytest.raises(OSError):
        sock.connect(("192.0.2.1", 22))
    with pytest.raises(OSError):
        paramiko.SSHClient().connect("192.0.2.1", timeout=0.1)
    with pytest.raises(OSError):
        subprocess.Popen(["ssh", "192.0.2.1", "true"])
    assert [what for what, _, _ in network_attempts] == [
        "socket.create_connection", "socket.connect", "paramiko.SSHClient.connect", "subprocess.Popen"]


def test_the_good_pair_validates(network_attempts):
    """Each case breaks exactly one thing in a pair that is otherwise valid."""
    result = validate(GOOD_RECIPE, GOOD_INVENTORY)
    assert result.exit_code == 0, result.stderr
    assert "node-a (rank 0), node-b (rank 1)" in result.stdout
    assert network_attempts == []


def test_the_good_pair_needs_the_default_known_hosts(controller, network_attempts):
    """The good inventory sets no ssh.known_hosts, so ~/.ssh/known_hosts must exist (the fixture made it)."""
    (controller / ".ssh" / "known_hosts").unlink()
    result = validate(GOOD_RECIPE, GOOD_INVENTORY)
    assert result.exit_code == 2
    assert f"error: {GOOD_INVENTORY}:8: ssh.known_hosts: known_hosts file {controller}/.ssh/known_hosts" in result.stderr
    assert "the inventory sets no ssh.known_hosts" in result.stderr
    assert network_attempts == []


def test_the_corpus_is_complete():
    names = {c["file"] for c in CASES}
    on_disk = {p.name for p in CORPUS.iterdir()} - {"expected.yaml", "good-inventory.yaml"}
    assert len(CASES) == len(names) >= 30
    assert on_disk - names == set(), "corpus files without an expectation"
    assert names - on_disk == {"r-does-not-exist.yaml"}, "expectations without a file (only the missing-file case)"
    assert all(n.startswith(("r-", "i-")) for n in names)


@pytest.mark.parametrize("case", CASES, ids=[c["file"] for c in CASES])
def test_broken_file_is_refused_with_file_line_and_key(case, network_attempts):
    recipe, inventory, broken = files_for(case)
    result = validate(recipe, inventory)

    assert network_attempts == [], "validate opened a connection"
    assert result.exit_code == 2, f"exit {result.exit_code}\nstdout: {result.stdout}\nstderr: {result.stderr}"
    assert result.exception is None or isinstance(result.exception, SystemExit), repr(result.exception)
    assert "Traceback" not in result.stderr + result.stdout
    assert result.stdout == ""
    errors = [line for line in result.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 1, result.stderr
    where = f"error: {broken}:{case['line']}:" if case["line"] is not None else f"error: {broken}:"
    assert errors[0].startswith(where + " "), f"expected {where!r} in {errors[0]!r}"
    if case["key"] is not None:
        assert errors[0].startswith(f"{where} {case['key']}: "), f"expected key {case['key']!r} in {errors[0]!r}"
    problem, marker, fix = errors[0].partition("; fix: ")
    assert case["says"] in problem
    assert marker, f"no `; fix: ` in {errors[0]!r}"
    assert case["fix"] in fix, f"the fix {case['fix']!r} is not what {errors[0]!r} says to do"
    assert LITERAL_SECRET not in result.stderr


def test_every_bad_input_names_its_fix():
    """Issue 22, acceptance 1: every case of the table names its fix (exit code, file, line, key and the
    fix itself are asserted for each by the test above); no case is exempt."""
    assert [c["file"] for c in CASES if not c.get("fix")] == []
    assert len(CASES) >= 25


# The same through the installed executable, for one case of each kind of failure.
REAL_CLI_CASES = ["r-yaml-unclosed-bracket.yaml", "r-non-utf8.yaml", "r-does-not-exist.yaml",
                  "r-gmu-097.yaml", "i-duplicate-fabric-ip.yaml", "r-expect-unknown-node.yaml",
                  "r-yaml-alias-bomb.yaml", "i-ssh-key-missing.yaml", "r-secret-not-set.yaml"]


@pytest.mark.parametrize("name", REAL_CLI_CASES)
def test_the_installed_command_says_the_same(name):
    case = next(c for c in CASES if c["file"] == name)
    recipe, inventory, broken = files_for(case)
    result = run_cli(["validate", str(recipe), "-i", str(inventory)], timeout=60)
    assert result.returncode == 2
    assert result.stdout == "" and "Traceback" not in result.stderr
    in_process = CliRunner().invoke(app, ["validate", str(recipe), "-i", str(inventory)])
    assert result.stderr == in_process.stderr
    assert str(broken) in result.stderr
