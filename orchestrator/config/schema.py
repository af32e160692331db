"""JSON Schema of the recipe and the inventory, from the same pydantic models `validate` uses, so an
editor (yaml-language-server) completes and checks the files as the tool will.

The generated files live in orchestrator/config/schemas/ (shipped with the package); shipped YAML files
point at them with a `# yaml-language-server: $schema=...` line. tests/unit/test_schema.py fails when a
file drifts from the models: regenerate with `spark-deploy schema recipe > orchestrator/config/schemas/recipe.schema.json`.
"""

from __future__ import annotations

import json
from enum import Enum
from pathlib import Path

from .inventory import Inventory
from .recipe import Recipe

SCHEMA_DIR = Path(__file__).parent / "schemas"
DIALECT = "https://json-schema.org/draft/2020-12/schema"


class SchemaKind(str, Enum):
    """The two files a user writes."""

    RECIPE = "recipe"
    INVENTORY = "inventory"


_MODELS = {SchemaKind.RECIPE: Recipe, SchemaKind.INVENTORY: Inventory}


def schema(kind: SchemaKind) -> dict:
    """The JSON Schema (2020-12) of one file kind: types, defaults, required keys, enums, descriptions."""
    body = _MODELS[kind].model_json_schema(mode="validation")
    return {"$schema": DIALECT, "$id": f"spark-deploy/{kind.value}.schema.json", **body}


def schema_text(kind: SchemaKind) -> str:
    return json.dumps(schema(kind), indent=2, sort_keys=False) + "\n"


def shipped_path(kind: SchemaKind) -> Path:
    return SCHEMA_DIR / f"{kind.value}.schema.json"
