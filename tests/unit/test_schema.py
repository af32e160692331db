"""`spark-deploy schema recipe|inventory` (issue 22): the JSON Schema editors use accepts every shipped
file, refuses the broken variants, and the copies shipped in the package match the models."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from ruamel.yaml import YAML
from typer.testing import CliRunner

from orchestrator.cli.main import app
from orchestrator.config.schema import SchemaKind, schema_text, shipped_path

REPO = Path(__file__).resolve().parents[2]
CORPUS = Path(__file__).parent / "corpus"
RECIPES = sorted((REPO / "recipes").glob("*.yaml")) + [REPO / "orchestrator" / "sim" / "recipes" / "sim-tiny.yaml"]
INVENTORIES = [REPO / "inventory.yaml", CORPUS / "good-inventory.yaml"]
# Corpus files broken at the level a schema sees (types, unknown and missing keys, enums, bounds).
BROKEN = ["r-type-string-for-int", "r-type-list-for-map", "r-type-int-for-string", "r-type-map-for-bool",
          "r-unknown-top", "r-unknown-vllm", "r-unknown-deep", "r-unknown-in-list", "r-restart-always",
          "r-moe-backend-invalid", "r-spec-no-method", "r-spec-zero-tokens",
          "i-type-string-for-int", "i-nodes-map-not-list", "i-unknown-node-key", "i-missing-head"]


def printed(kind: str) -> dict:
    result = CliRunner().invoke(app, ["schema", kind])
    assert result.exit_code == 0, result.output
    return json.loads(result.stdout)


def load(path: Path):
    return YAML(typ="safe").load(path.read_text(encoding="utf-8"))


@pytest.mark.parametrize("kind", list(SchemaKind))
def test_the_shipped_schema_is_what_the_models_make(kind):
    assert shipped_path(kind).read_text() == schema_text(kind), \
        f"run: spark-deploy schema {kind.value} > {shipped_path(kind).relative_to(REPO)}"


@pytest.mark.parametrize("path", RECIPES + INVENTORIES, ids=lambda p: p.name)
def test_every_shipped_file_validates_and_points_at_the_schema(path):
    kind = "inventory" if "inventory" in path.name else "recipe"
    jsonschema.validate(load(path), printed(kind))
    if path.parent == CORPUS:
        return  # a test input, not a shipped file
    first = path.read_text().splitlines()[0]
    assert first.startswith("# yaml-language-server: $schema=")
    target = (path.parent / first.split("=", 1)[1]).resolve()
    assert target == shipped_path(SchemaKind(kind)).resolve()


@pytest.mark.parametrize("name", BROKEN)
def test_the_broken_variants_are_refused(name):
    schema = printed("inventory" if name.startswith("i-") else "recipe")
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(load(CORPUS / f"{name}.yaml"), schema)


def test_the_schema_describes_what_users_found_by_trial():
    recipe, inventory = printed("recipe"), printed("inventory")
    assert "vllm serve" in recipe["$defs"]["ImageSpec"]["properties"]["serve_entrypoint"]["description"]
    node = inventory["$defs"]["Node"]
    assert {"jit_cache", "hf_cache", "fabric_ip"} <= set(node["required"])
    assert "`~`" in node["properties"]["jit_cache"]["description"]
    assert recipe["$defs"]["RestartPolicy"]["properties"]["policy"]["enum"] == ["no", "on-failure"]


def test_the_reference_tables_in_the_docs_are_generated_from_the_models():
    from orchestrator.config.reference import generated

    doc = (REPO / "docs" / "recipes.md").read_text()
    assert generated() in doc, "docs/recipes.md drifted: run python -m orchestrator.config.reference docs/recipes.md"


def _properties(schema: dict):
    """(where, property) for every property of every object in a JSON Schema."""
    for name, definition in [("", schema), *schema.get("$defs", {}).items()]:
        for key, prop in definition.get("properties", {}).items():
            yield f"{name or schema.get('title')}.{key}", prop


@pytest.mark.parametrize("kind", ["recipe", "inventory"])
def test_every_key_has_a_description(kind):
    """Issue 22: an editor shows each key's meaning; docs/recipes.md's tables carry the same words."""
    schema = printed(kind)
    assert [where for where, prop in _properties(schema) if not prop.get("description")] == []
    assert all(d.get("description") for d in schema["$defs"].values() if d.get("type") == "object")
