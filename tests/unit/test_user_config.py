"""Issue 22: the config file (~/.config/spark-deploy/config.yaml, $XDG_CONFIG_HOME respected): the default
inventory and named clusters (`-c lab`), overridden by env and flags; a bad file or name is exit 2 naming
the file, the line, the key and the fix."""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from orchestrator.cli import user_config
from orchestrator.cli.main import app
import cli_json

REPO = Path(__file__).resolve().parents[2]
RECIPE = REPO / "orchestrator" / "sim" / "recipes" / "sim-tiny.yaml"
GOOD_INVENTORY = Path(__file__).parent / "corpus" / "good-inventory.yaml"


@pytest.fixture
def home(tmp_path) -> dict:
    """Two inventories (`lab` and `prod`, told apart by their plans) and a clean env."""
    for name, debug in (("lab", "INFO"), ("prod", "WARN")):  # an env value: another plan hash
        (tmp_path / f"{name}.yaml").write_text(GOOD_INVENTORY.read_text().replace("NCCL_DEBUG: INFO",
                                                                                  f"NCCL_DEBUG: {debug}"))
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_HOME": str(tmp_path / "xdg"), "SPARK_DEPLOY_INVENTORY": "",
            "SPARK_DEPLOY_CLUSTER": "", "SPARK_DEPLOY_CONFIG": "", "tmp": str(tmp_path)}


def write_config(env: dict, text: str) -> Path:
    path = Path(env["XDG_CONFIG_HOME"]) / "spark-deploy" / "config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def render(env: dict, *args: str):
    env = {k: v for k, v in env.items() if k != "tmp"}
    result = CliRunner().invoke(app, ["render", str(RECIPE), *args, "--json"], env=env)
    return result, cli_json.result(result.stdout) if result.stdout.strip() else None


def test_a_named_cluster_stands_for_its_inventory(home):
    write_config(home, f"clusters:\n  lab: {home['tmp']}/lab.yaml\n  prod: ../../prod.yaml\n")
    lab, lab_plan = render(home, "-c", "lab")
    prod, prod_plan = render(home, "-c", "prod")  # relative to the config file's directory
    direct, direct_plan = render(home, "-i", f"{home['tmp']}/lab.yaml")
    assert (lab.exit_code, prod.exit_code, direct.exit_code) == (0, 0, 0), lab.stderr + prod.stderr
    assert lab_plan == direct_plan
    assert lab_plan[0]["plan_hash"] != prod_plan[0]["plan_hash"]


def test_the_default_inventory_then_env_then_flags(home):
    write_config(home, f"inventory: {home['tmp']}/prod.yaml\nclusters:\n  lab: {home['tmp']}/lab.yaml\n")
    _, by_default = render(home)
    _, by_flag = render(home, "-i", f"{home['tmp']}/lab.yaml")
    _, by_env = render({**home, "SPARK_DEPLOY_CLUSTER": "lab"})
    _, flag_over_env = render({**home, "SPARK_DEPLOY_INVENTORY": f"{home['tmp']}/prod.yaml"}, "-c", "lab")
    _, prod = render(home, "-i", f"{home['tmp']}/prod.yaml")
    assert by_default == prod
    assert by_flag == by_env == flag_over_env != prod


def test_xdg_config_home_is_respected_and_home_config_is_the_default(home):
    assert user_config.config_path({"XDG_CONFIG_HOME": "/x", "HOME": "/h"}) == Path("/x/spark-deploy/config.yaml")
    assert user_config.config_path({"HOME": "/h"}) == Path("/h/.config/spark-deploy/config.yaml")
    assert user_config.config_path({"SPARK_DEPLOY_CONFIG": "/c.yaml", "HOME": "/h"}) == Path("/c.yaml")


def test_both_flags_is_bad_input(home):
    write_config(home, f"clusters:\n  lab: {home['tmp']}/lab.yaml\n")
    result, payload = render(home, "-c", "lab", "-i", f"{home['tmp']}/lab.yaml")
    assert result.exit_code == 2 and "give one" in result.stderr


def test_an_unknown_cluster_names_the_file_and_suggests(home):
    path = write_config(home, f"clusters:\n  lab: {home['tmp']}/lab.yaml\n  prod: {home['tmp']}/prod.yaml\n")
    result, _ = render(home, "-c", "lbb")
    assert result.exit_code == 2
    assert str(path) in result.stderr and "no cluster 'lbb'" in result.stderr and "did you mean 'lab'" in result.stderr


def test_no_config_file_says_how_to_make_one(home):
    result, _ = render(home, "-c", "lab")
    assert result.exit_code == 2 and "create" in result.stderr and "clusters:" in result.stderr


def test_a_bad_key_is_named_with_its_line_and_the_fix(home):
    path = write_config(home, f"# mine\nclusters:\n  lab: {home['tmp']}/lab.yaml\ninventroy: x.yaml\n")
    result, _ = render(home, "-c", "lab")
    assert result.exit_code == 2
    assert f"{path}:4: inventroy: unknown key; fix: did you mean 'inventory'?" in " ".join(result.stderr.split())


def test_a_bad_value_is_named(home):
    path = write_config(home, "clusters:\n  lab: 3\n")
    result, _ = render(home, "-c", "lab")
    assert result.exit_code == 2 and f"{path}:2: clusters.lab: want a path" in " ".join(result.stderr.split())
