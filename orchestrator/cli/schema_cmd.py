"""`schema`: print the JSON Schema of a recipe or an inventory (read-only, no node contacted)."""

from __future__ import annotations

from typing import Annotated

import typer

from ..config.schema import SchemaKind, schema_text
from .common import JsonOpt, exit_codes


def schema(kind: Annotated[SchemaKind, typer.Argument(help="Which file: recipe or inventory.")],
           as_json: JsonOpt = False) -> None:
    """Print the JSON Schema of a recipe or an inventory (types, defaults, required keys, enums).

    The same schema ships in the package (orchestrator/config/schemas/); shipped files point editors at
    it with a `# yaml-language-server: $schema=...` line.

    Example: spark-deploy schema recipe > recipe.schema.json
    """
    del as_json  # accepted for the common convention: the output is one JSON object either way
    with exit_codes():
        typer.echo(schema_text(kind), nl=False)
