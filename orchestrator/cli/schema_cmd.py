"""`schema`: print the JSON Schema of a recipe or an inventory (read-only, no node contacted)."""

from __future__ import annotations

import json
from typing import Annotated

import typer

from ..config.schema import SchemaKind, schema_text
from .common import JsonOpt, emit_json, exit_codes


def schema(kind: Annotated[SchemaKind, typer.Argument(help="Which file: recipe or inventory.")],
           as_json: JsonOpt = False) -> None:
    """Print the JSON Schema of a recipe or an inventory (types, defaults, required keys, enums).

    The same schema ships in the package (orchestrator/config/schemas/); shipped files point editors at
    it with a `# yaml-language-server: $schema=...` line.

    Example: spark-deploy schema recipe > recipe.schema.json
    """
    with exit_codes(as_json):
        if as_json:  # the schema as the result of the one output contract
            emit_json(json.loads(schema_text(kind)))
        else:
            typer.echo(schema_text(kind), nl=False)
