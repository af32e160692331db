"""The example inventory and the shipped recipes pass `validate` on a fresh clone, as docs/getting-started.md
says: with HF_TOKEN exported (the recipes name it) and a known_hosts file (setup writes ~/.ssh/known_hosts).
The clone is the committed files (`git archive HEAD`), run in a HOME that holds nothing else."""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest

from cli_zygote import run_cli

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def clone(tmp_path):
    tree = tmp_path / "clone"
    tree.mkdir()
    archive = tmp_path / "head.tar"
    subprocess.run(["git", "-C", str(REPO), "archive", "-o", str(archive), "HEAD", "inventory.yaml", "recipes"],
                   check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(tree, filter="data")
    home = tmp_path / "home"
    (home / ".ssh").mkdir(parents=True)
    (home / ".ssh" / "known_hosts").touch()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "SPARK_DEPLOY_", "XDG_"))}
    return tree, {**env, "HOME": str(home)}


def _validate(tree: Path, recipe: Path, env: dict):
    return run_cli(["validate", str(recipe.relative_to(tree)), "-i", "inventory.yaml"], env=env, cwd=tree)


def test_every_shipped_recipe_validates_against_the_example_inventory(clone):
    tree, env = clone
    recipes = sorted((tree / "recipes").glob("*.yaml"))
    assert recipes
    for recipe in recipes:
        result = _validate(tree, recipe, {**env, "HF_TOKEN": "hf_example"})
        assert result.returncode == 0, f"{recipe.name}: {result.stderr}"


def test_without_the_token_it_names_the_recipes_line_and_the_export(clone):
    tree, env = clone
    result = _validate(tree, tree / "recipes" / "dspark-0731-b12x.yaml", env)
    assert result.returncode == 2
    assert "recipes/dspark-0731-b12x.yaml:" in result.stderr and "export HF_TOKEN" in result.stderr, result.stderr
