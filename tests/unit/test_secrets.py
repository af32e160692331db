"""Acceptance 4 (issue #2): a secret named under `secrets:` never shows up in what the tool prints.

The recipe names HF_TOKEN; the token itself is in the environment. `render` (text and --json) must
not print it, the rendered argv carries only `--env-file <state_dir>/secrets/<recipe>.env`, and a
file that writes the token inline is refused without the error repeating it.
"""

from __future__ import annotations

import secrets
import string
from pathlib import Path

import pytest
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from ruamel.yaml import YAML
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.config.load import load_deployment
from orchestrator.config.source import ConfigError, ConfigIssue
from orchestrator.render.plan import render_plan
from cli_zygote import run_cli
import cli_json

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "recipes" / "dspark-0731-b12x.yaml"
INVENTORY = REPO / "inventory.yaml"

# One fresh token per run, shaped like a real one (mixed case, so name patterns reject it too).
TOKEN = "hf_Q" + "".join(secrets.choice(string.ascii_letters + string.digits) for _ in range(33))


def _load(path: Path):
    return YAML(typ="rt").load(path.read_text(encoding="utf-8"))


def _dump(data, path: Path) -> Path:
    with path.open("w", encoding="utf-8") as fh:
        YAML(typ="rt").dump(data, fh)
    return path


def _controller_files(directory: Path) -> tuple[str, str]:
    """A private key (mode 0600) and a known_hosts file, so `validate`'s local checks pass."""
    key = Ed25519PrivateKey.generate().private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                                     serialization.NoEncryption())
    key_path, known_hosts = directory / "id_ed25519", directory / "known_hosts"
    key_path.write_bytes(key)
    key_path.chmod(0o600)
    known_hosts.write_text("")
    return str(key_path), str(known_hosts)


@pytest.fixture
def inventory_with_two_state_dirs(tmp_path) -> Path:
    inv = _load(INVENTORY)
    inv["nodes"][1]["state_dir"] = "/srv/spark-deploy-state"
    inv["ssh"]["key"], inv["ssh"]["known_hosts"] = _controller_files(tmp_path)
    return _dump(inv, tmp_path / "inventory.yaml")


@pytest.fixture
def token_in_env(monkeypatch) -> str:
    monkeypatch.setenv("HF_TOKEN", TOKEN)
    return TOKEN


def test_the_recipe_names_the_secret():
    assert _load(RECIPE)["secrets"] == ["HF_TOKEN"]
    assert TOKEN not in RECIPE.read_text() and TOKEN not in INVENTORY.read_text()


def test_render_output_never_holds_the_token(inventory_with_two_state_dirs):
    env = {"PATH": "/usr/bin:/bin", "HF_TOKEN": TOKEN, "HOME": str(inventory_with_two_state_dirs.parent)}
    for extra in ([], ["--json"], ["--node", "spark-2"], ["--node", "spark-2", "--json"]):
        result = run_cli(["render", str(RECIPE), "-i", str(inventory_with_two_state_dirs), *extra], env=env, timeout=60)
        assert result.returncode == 0, result.stderr
        assert TOKEN not in result.stdout and TOKEN not in result.stderr
        assert TOKEN[3:] not in result.stdout + result.stderr  # nor the token's body in some other wrapping
    validate = run_cli(["validate", str(RECIPE), "-i", str(inventory_with_two_state_dirs)], env=env, timeout=60)
    assert validate.returncode == 0 and TOKEN not in validate.stdout + validate.stderr


def test_validate_refuses_a_secret_the_shell_does_not_set(inventory_with_two_state_dirs, monkeypatch):
    """Bad input (exit 2) naming the recipe's line of the secret, found before `up` would connect."""
    monkeypatch.delenv("HF_TOKEN", raising=False)
    result = CliRunner().invoke(app, ["validate", str(RECIPE), "-i", str(inventory_with_two_state_dirs)])
    assert result.exit_code == 2, result.stdout + result.stderr
    line = next(i for i, text in enumerate(RECIPE.read_text().splitlines(), 1) if text.strip().startswith("- HF_TOKEN"))
    assert f"error: {RECIPE}:{line}: secrets.0: HF_TOKEN is not set in this shell's environment" in result.stderr


def test_argv_carries_only_the_env_file(token_in_env, inventory_with_two_state_dirs):
    dep = load_deployment(RECIPE, inventory_with_two_state_dirs)
    plan = render_plan(dep)
    expected = {"spark-1": "/var/lib/spark-deploy/secrets/dspark-0731-b12x.env",
                "spark-2": "/srv/spark-deploy-state/secrets/dspark-0731-b12x.env"}
    for launch in plan:
        argv = list(launch.argv)
        assert argv.count("--env-file") == 1
        assert argv[argv.index("--env-file") + 1] == expected[launch.node.name] == launch.env_file
        assert launch.env_file == f"{launch.node.state_dir}/secrets/{dep.recipe.name}.env"
        assert not any(token_in_env in token for token in argv)
        # Not even by name: `--env HF_TOKEN` would pass the controller's value through docker.
        assert not any("HF_TOKEN" in token for token in argv)
        assert token_in_env not in launch.printed


def test_json_names_the_env_file_and_not_the_token(token_in_env, inventory_with_two_state_dirs):
    result = CliRunner().invoke(app, ["render", str(RECIPE), "-i", str(inventory_with_two_state_dirs), "--json"])
    assert result.exit_code == 0, result.stderr
    assert token_in_env not in result.stdout + result.stderr
    plan = cli_json.result(result.stdout)
    assert [entry["secrets_env_file"] for entry in plan] == [
        "/var/lib/spark-deploy/secrets/dspark-0731-b12x.env", "/srv/spark-deploy-state/secrets/dspark-0731-b12x.env"]


def test_without_secrets_there_is_no_env_file(tmp_path, token_in_env):
    recipe = _load(RECIPE)
    del recipe["secrets"]
    plan = render_plan(load_deployment(_dump(recipe, tmp_path / "recipe.yaml"), INVENTORY))
    assert all("--env-file" not in launch.argv and launch.env_file is None for launch in plan)


def _set(tree, path: tuple, value):
    for key in path[:-1]:
        tree = tree[key]
    tree[path[-1]] = value


# Where a token written inline must make the load fail: (file, path, value-or-None for the token).
INLINE = {
    "recipe env HF_TOKEN": ("recipe", ("env", "HF_TOKEN"), None),
    "recipe env, innocent name": ("recipe", ("env", "DOWNLOAD_HINT"), None),
    "recipe vllm.extra value": ("recipe", ("vllm", "extra", "tokenizer"), None),
    "recipe vllm.extra --hf-token": ("recipe", ("vllm", "extra", "hf-token"), None),
    "recipe served_model_name": ("recipe", ("serve", "served_model_name"), None),
    "recipe name": ("recipe", ("name",), None),
    "recipe model.repo": ("recipe", ("model", "repo"), None),
    "recipe model.revision": ("recipe", ("model", "revision"), "{token}!"),
    "recipe image.id": ("recipe", ("image", "id"), None),
    "recipe image.ref": ("recipe", ("image", "ref"), "ghcr.io/x/y:{token} z"),
    "recipe mounts.hf_cache": ("recipe", ("mounts", "hf_cache"), None),
    "recipe docker.gpus": ("recipe", ("docker", "gpus"), None),
    "recipe secrets entry": ("recipe", ("secrets",), ["{token}"]),
    "recipe unknown key": ("recipe", ("{token}",), 1),
    "recipe expect node": ("recipe", ("expect", "lines", 0, "nodes"), ["{token}"]),
    "inventory node env": ("inventory", ("nodes", 1, "env", "HF_TOKEN"), None),
    "inventory node env, innocent name": ("inventory", ("nodes", 0, "env"), {"DOWNLOAD_HINT": "{token}"}),
    "inventory cluster": ("inventory", ("cluster",), None),
    "inventory fabric_ip": ("inventory", ("nodes", 1, "fabric_ip"), None),
    "inventory address": ("inventory", ("nodes", 1, "address"), "{token}.local;"),
    "inventory jit_cache": ("inventory", ("nodes", 0, "jit_cache"), None),
    "inventory ssh user": ("inventory", ("ssh", "user"), None),
}


def _with_token(value):
    if value is None:
        return TOKEN
    if isinstance(value, str):
        return value.format(token=TOKEN)
    if isinstance(value, list):
        return [_with_token(v) for v in value]
    if isinstance(value, dict):
        return {k: _with_token(v) for k, v in value.items()}
    return value


@pytest.mark.parametrize("where", list(INLINE))
def test_a_token_written_inline_is_refused_without_repeating_it(where, tmp_path, token_in_env):
    which, path, value = INLINE[where]
    recipe, inventory = _load(RECIPE), _load(INVENTORY)
    tree = recipe if which == "recipe" else inventory
    path = tuple(TOKEN if p == "{token}" else p for p in path)
    _set(tree, path, _with_token(value))
    recipe_path, inventory_path = _dump(recipe, tmp_path / "recipe.yaml"), _dump(inventory, tmp_path / "inventory.yaml")
    assert TOKEN in (recipe_path if which == "recipe" else inventory_path).read_text()

    with pytest.raises(ConfigError) as caught:
        load_deployment(recipe_path, inventory_path)
    shown = str(caught.value) + repr(caught.value.issues) + repr(caught.value.args)
    assert TOKEN not in shown and TOKEN[3:] not in shown

    result = CliRunner().invoke(app, ["validate", str(recipe_path), "-i", str(inventory_path)])
    assert result.exit_code == 2
    assert str(recipe_path if which == "recipe" else inventory_path) in result.stderr
    assert TOKEN not in result.stdout + result.stderr and TOKEN[3:] not in result.stdout + result.stderr


def test_a_duplicated_secret_key_is_refused_without_repeating_either_value(tmp_path, token_in_env):
    """ruamel's duplicate-key message quotes both values; the loader must not pass them on."""
    other = "hf_" + TOKEN[::-1][:-3]
    text = RECIPE.read_text().replace('env:\n', f'env:\n  HF_TOKEN: {TOKEN}\n  HF_TOKEN: {other}\n', 1)
    path = tmp_path / "recipe.yaml"
    path.write_text(text)
    result = CliRunner().invoke(app, ["validate", str(path), "-i", str(INVENTORY)])
    assert result.exit_code == 2
    assert 'duplicate key "HF_TOKEN"' in result.stderr
    for secret in (TOKEN, other, TOKEN[3:], other[3:]):
        assert secret not in result.stdout + result.stderr


def test_issue_text_redacts_token_shaped_values():
    issue = ConfigIssue("r.yaml", 3, f"env.{TOKEN}", f"{TOKEN!r} is not a name; also 'sk-{TOKEN[3:]}'")
    assert TOKEN not in str(issue) and TOKEN[3:] not in str(issue)
    assert str(issue).startswith("r.yaml:3: env.<redacted>: '<redacted>' is not a name")
    plain = ConfigIssue("r.yaml", 3, "vllm.extra.task-abcdefghij", "hf_short is fine")
    assert str(plain) == "r.yaml:3: vllm.extra.task-abcdefghij: hf_short is fine"
