"""Issue 8, inputs 2: this machine's SSH key and known_hosts, and the recipe's secrets, are checked by
`validate` (and by `up`, through the same `local_problems`) before any connection: exit 2 naming file,
line and key. `render` does not need them. Keys are real keys made here and parsed with paramiko.
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

import paramiko
import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric import ec, ed25519, rsa
from ruamel.yaml import YAML
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.config.load import load_deployment
from orchestrator.config.local_checks import key_problem, local_problems
from cli_zygote import run_cli

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "orchestrator" / "sim" / "recipes" / "sim-tiny.yaml"
GOOD_INVENTORY = Path(__file__).parent / "corpus" / "good-inventory.yaml"
SECRET = "hf_LocalChecksNeverShowThis0123456789"


def private_bytes(kind: str, password: bytes | None = None) -> bytes:
    encryption = serialization.BestAvailableEncryption(password) if password else serialization.NoEncryption()
    if kind == "ed25519":
        return ed25519.Ed25519PrivateKey.generate().private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, encryption)
    if kind == "rsa-pem":
        return rsa.generate_private_key(65537, 2048).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.TraditionalOpenSSL, encryption)
    if kind == "ecdsa":
        return ec.generate_private_key(ec.SECP256R1()).private_bytes(
            serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH, encryption)
    raise ValueError(kind)


def write_key(path: Path, content: bytes, mode: int = 0o600) -> Path:
    path.write_bytes(content)
    path.chmod(mode)
    return path


@pytest.fixture
def home(tmp_path, monkeypatch) -> Path:
    """A HOME with ~/.ssh/known_hosts, and no secrets set but the ones a test sets."""
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").write_text("")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("SPARK_DEPLOY_TEST_SECRET", raising=False)
    return home


@pytest.fixture
def no_network(monkeypatch) -> list:
    attempts: list = []

    def refuse(*args, **kwargs):
        attempts.append(args)
        raise OSError("network use refused in this test")

    monkeypatch.setattr(socket.socket, "connect", refuse)
    monkeypatch.setattr(socket, "create_connection", refuse)
    monkeypatch.setattr(paramiko.SSHClient, "connect", refuse)
    return attempts


def inventory(tmp_path: Path, ssh: dict | None = None, node_b_ssh: dict | None = None) -> Path:
    yaml = YAML(typ="rt")
    yaml.width = 4096  # a long temp path must stay on its key's line (line_of looks for it there)
    data = yaml.load(GOOD_INVENTORY.read_text())
    data["ssh"].update(ssh or {})
    if node_b_ssh:
        data["nodes"][1]["ssh"] = node_b_ssh
    path = tmp_path / "inventory.yaml"
    with path.open("w") as fh:
        yaml.dump(data, fh)
    return path


def recipe_with_secret(tmp_path: Path) -> Path:
    path = tmp_path / "recipe.yaml"
    path.write_text(RECIPE.read_text() + "secrets:\n  - SPARK_DEPLOY_TEST_SECRET\n")
    return path


def line_of(path: Path, fragment: str) -> int:
    return next(i for i, text in enumerate(path.read_text().splitlines(), 1) if fragment in text)


def validate(recipe: Path, inv: Path):
    return CliRunner().invoke(app, ["validate", str(recipe), "-i", str(inv)])


def errors(result) -> list[str]:
    return [line for line in result.stderr.splitlines() if line.startswith("error: ")]


@pytest.mark.parametrize("kind", ["ed25519", "rsa-pem", "ecdsa"])
def test_a_private_key_paramiko_reads_passes(kind, tmp_path, home, no_network):
    key = write_key(tmp_path / "id", private_bytes(kind))
    result = validate(RECIPE, inventory(tmp_path, {"key": str(key)}))
    assert result.exit_code == 0, result.stderr
    assert no_network == []


def _bad_key(tmp_path: Path, case: str) -> tuple[Path, str]:
    """(the key path, what the error must say) for one way a key file can be unusable."""
    path = tmp_path / "id_bad"
    if case == "missing":
        return path, f"private key {path}: cannot read file: No such file or directory"
    if case == "mode 0644":
        return write_key(path, private_bytes("ed25519"), 0o644), f"readable by group or others (mode 0644); OpenSSH refuses such a key; fix: chmod 600 {path}"
    if case == "mode 0640":
        return write_key(path, private_bytes("ed25519"), 0o640), "(mode 0640)"
    if case == "public key":
        public = ed25519.Ed25519PrivateKey.generate().public_key().public_bytes(
            serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        return write_key(path, public + b" me@host\n"), "is a public key, not a private key"
    if case == "junk":
        return write_key(path, b"not a key at all\n"), "is not a private key paramiko can read"
    if case == "binary":
        return write_key(path, os.urandom(512)), "is not a private key"
    if case == "encrypted":
        return write_key(path, private_bytes("ed25519", b"passphrase")), "is encrypted and needs a passphrase"
    if case == "encrypted rsa":
        return write_key(path, private_bytes("rsa-pem", b"passphrase")), "is encrypted and needs a passphrase"
    if case == "directory":
        path.mkdir()
        return path, "is a directory, not a regular file"
    if case == "fifo":
        os.mkfifo(path, 0o600)
        return path, "is a FIFO (named pipe), not a regular file"
    raise ValueError(case)


BAD_KEYS = ["missing", "mode 0644", "mode 0640", "public key", "junk", "binary", "encrypted", "encrypted rsa",
            "directory", "fifo"]


@pytest.mark.parametrize("case", BAD_KEYS)
def test_a_bad_default_key_is_bad_input_at_its_line(case, tmp_path, home, no_network):
    key, says = _bad_key(tmp_path, case)
    inv = inventory(tmp_path, {"key": str(key)})
    result = validate(RECIPE, inv)
    assert result.exit_code == 2, result.stdout + result.stderr
    assert len(errors(result)) == 1, result.stderr
    assert errors(result)[0].startswith(f"error: {inv}:{line_of(inv, 'key:')}: ssh.key: "), result.stderr
    assert says in errors(result)[0], result.stderr
    assert no_network == []


def test_a_bad_key_of_one_node_is_named_at_that_node(tmp_path, home, no_network):
    good = write_key(tmp_path / "id_good", private_bytes("ed25519"))
    bad = write_key(tmp_path / "id_node_b", private_bytes("ed25519"), 0o644)
    inv = inventory(tmp_path, {"key": str(good)}, node_b_ssh={"key": str(bad)})
    result = validate(RECIPE, inv)
    assert result.exit_code == 2
    assert errors(result) == [f"error: {inv}:{line_of(inv, str(bad))}: nodes.1.ssh.key: private key {bad} is readable "
                              f"by group or others (mode 0644); OpenSSH refuses such a key; fix: chmod 600 {bad}"]


def test_a_missing_known_hosts_file_is_bad_input(tmp_path, home, no_network):
    missing = tmp_path / "nowhere" / "known_hosts"
    inv = inventory(tmp_path, {"known_hosts": str(missing)})
    result = validate(RECIPE, inv)
    assert result.exit_code == 2
    assert len(errors(result)) == 1
    assert errors(result)[0].startswith(f"error: {inv}:{line_of(inv, 'known_hosts:')}: ssh.known_hosts: "
                                        f"known_hosts file {missing}: cannot read file")


def test_the_default_known_hosts_must_exist_when_none_is_set(tmp_path, home, no_network):
    (home / ".ssh" / "known_hosts").unlink()
    inv = inventory(tmp_path)
    result = validate(RECIPE, inv)
    assert result.exit_code == 2
    assert f"ssh.known_hosts: known_hosts file {home}/.ssh/known_hosts: cannot read file" in result.stderr
    assert "it is the default because the inventory sets no ssh.known_hosts" in result.stderr


def test_an_unset_secret_is_bad_input_at_the_recipe_line(tmp_path, home, no_network):
    recipe = recipe_with_secret(tmp_path)
    result = validate(recipe, inventory(tmp_path))
    assert result.exit_code == 2
    assert errors(result) == [f"error: {recipe}:{line_of(recipe, '- SPARK_DEPLOY_TEST_SECRET')}: secrets.0: "
                              "SPARK_DEPLOY_TEST_SECRET is not set in this shell's environment; fix: export it first "
                              "(`read -rs SPARK_DEPLOY_TEST_SECRET && export SPARK_DEPLOY_TEST_SECRET`); it goes to "
                              "each node's env-file (mode 0600), never on a command line"]


def test_a_set_secret_passes_and_is_never_shown(tmp_path, home, monkeypatch, no_network):
    monkeypatch.setenv("SPARK_DEPLOY_TEST_SECRET", SECRET)
    result = validate(recipe_with_secret(tmp_path), inventory(tmp_path))
    assert result.exit_code == 0, result.stderr
    assert SECRET not in result.stdout + result.stderr


def test_a_secret_with_a_line_break_is_refused_without_showing_it(tmp_path, home, monkeypatch):
    """An env-file line is NAME=value: a newline in the value would smuggle in another variable."""
    monkeypatch.setenv("SPARK_DEPLOY_TEST_SECRET", SECRET + "\nLD_PRELOAD=/tmp/x.so")
    result = validate(recipe_with_secret(tmp_path), inventory(tmp_path))
    assert result.exit_code == 2
    assert "contains a line break or NUL" in result.stderr
    assert SECRET not in result.stdout + result.stderr and "LD_PRELOAD" not in result.stdout + result.stderr


def test_every_local_problem_is_reported_in_one_run(tmp_path, home, no_network):
    key = write_key(tmp_path / "id", private_bytes("ed25519"), 0o604)
    inv = inventory(tmp_path, {"key": str(key), "known_hosts": str(tmp_path / "absent")})
    recipe = recipe_with_secret(tmp_path)
    result = validate(recipe, inv)
    assert result.exit_code == 2
    assert [e.split(": ")[1] for e in errors(result)] == [
        f"{inv}:{line_of(inv, 'key:')}", f"{inv}:{line_of(inv, 'known_hosts:')}",
        f"{recipe}:{line_of(recipe, '- SPARK_DEPLOY_TEST_SECRET')}"]


def test_render_needs_neither_keys_nor_secrets(tmp_path, home, no_network):
    """The local checks are not part of the model: a plan can be rendered on any machine."""
    (home / ".ssh" / "known_hosts").unlink()
    inv = inventory(tmp_path, {"key": str(tmp_path / "absent-key"), "known_hosts": str(tmp_path / "absent")})
    result = CliRunner().invoke(app, ["render", str(recipe_with_secret(tmp_path)), "-i", str(inv)])
    assert result.exit_code == 0, result.stderr


def test_local_problems_is_what_up_calls(tmp_path, home, monkeypatch):
    """The function `up` runs before connecting: [] when all is well, else the same issues `validate` prints."""
    key = write_key(tmp_path / "id", private_bytes("ed25519"))
    dep = load_deployment(recipe_with_secret(tmp_path), inventory(tmp_path, {"key": str(key)}))
    assert [i.key for i in local_problems(dep, os.environ)] == ["secrets.0"]
    assert local_problems(dep, {**os.environ, "SPARK_DEPLOY_TEST_SECRET": "x"}) == []
    key.chmod(0o644)
    assert [(i.key, i.line) for i in local_problems(dep, {"HOME": str(home), "SPARK_DEPLOY_TEST_SECRET": "x"})] == [
        ("ssh.key", line_of(Path(dep.inventory_path), "key:"))]


def test_the_installed_command_refuses_a_fifo_key_promptly(tmp_path, home):
    key, _ = _bad_key(tmp_path, "fifo")
    inv = inventory(tmp_path, {"key": str(key)})
    started = time.monotonic()
    result = run_cli(["validate", str(RECIPE), "-i", str(inv)], env={**os.environ, "HOME": str(home)}, timeout=60)
    assert time.monotonic() - started < 8.0
    assert result.returncode == 2 and "Traceback" not in result.stderr
    assert f"{inv}:{line_of(inv, 'key:')}: ssh.key: private key {key}: is a FIFO" in result.stderr


def test_the_key_the_simulated_cluster_writes_passes(tmp_path):
    """`sim up` writes its own inventory with this key: it must survive the checks, even over an old 0644 file."""
    provision = pytest.importorskip("orchestrator.sim.provision")
    stale = write_key(tmp_path / "id_ed25519", b"old", 0o644)
    path, _, _ = provision.generate_keypair(tmp_path, "test")
    assert path == stale and (path.stat().st_mode & 0o777) == 0o600
    assert key_problem(str(path)) is None


def test_up_itself_refuses_on_local_problems_before_any_connection(tmp_path, monkeypatch):
    """The precondition lives in `up`, so every path that starts a release (rollback, maintenance end,
    bench --compare, demo) meets it, not only the `up` command line."""
    from fakes import deployment

    from orchestrator.config.source import ConfigError
    from orchestrator.deploy import up as up_mod
    from orchestrator.runner.events import Events

    dep = deployment(tmp_path)  # its key and known_hosts (/home/spark/.ssh/...) do not exist here

    def no_connection(*_a, **_k):
        raise AssertionError("up connected despite local problems")

    monkeypatch.setattr(up_mod, "Cluster", no_connection)
    with pytest.raises(ConfigError) as caught:
        up_mod.up(dep, Events())
    assert {i.key for i in caught.value.issues} >= {"ssh.key"}
