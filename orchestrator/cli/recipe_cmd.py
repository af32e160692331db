"""`recipe import`: a sparkrun or eugr/spark-vllm-docker recipe as a spark-deploy recipe (never contacts a node)."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape

from ..config.peers.importer import import_recipe
from ..config.peers.parts import PeerFormat
from .common import BadInput, JsonOpt, emit_json, err, exit_codes, out
from .conventions import sub_app

app = sub_app(help="Recipes from other launchers: import.")


@app.command("import")
def import_(
    file: Annotated[Path, typer.Argument(help="The sparkrun or eugr/spark-vllm-docker recipe YAML.", show_default=False)],
    output: Annotated[Optional[Path], typer.Option("--output", "-o", help="The recipe to write (an existing file is "
                                                   "never replaced); default: print it.", show_default=False)] = None,
    source_format: Annotated[Optional[PeerFormat], typer.Option("--from", help="The peer's format, when its content does not "
                                                          "say it (default: detected).", show_default=False)] = None,
    as_json: JsonOpt = False,
) -> None:
    """Write a spark-deploy recipe from a sparkrun recipe or an eugr/spark-vllm-docker recipe: each value
    with a comment naming the key it came from; each key not written listed with why (a warning, exit 0),
    flags vLLM would refuse included; the image left unpinned, with the `pin` line to run.

    Example: spark-deploy recipe import minimax-m2-awq.yaml -o recipes/minimax-m2-awq.yaml
    """
    with exit_codes(as_json):
        if output is not None and (output.exists() or output.is_symlink()):
            raise BadInput(f"{output} exists: nothing was written; give another -o, or move that file away first")
        result = import_recipe(file, source_format, str(output) if output is not None else None)
        if output is not None:
            _write(output, result.text)
        if as_json:
            emit_json({"ok": True, "file": str(file), "format": str(result.format), "detected_by": result.detected_by,
                       "output": str(output) if output is not None else None,
                       "recipe": result.text if output is None else None,
                       "mapped": [{"key": ".".join(p.target), "from": p.source.key, "line": p.source.line}
                                  for p in result.placed],
                       "unmapped": [{"from": l.source.key, "line": l.source.line, "reason": l.reason}
                                    for l in result.left],
                       "image": result.image_ref, "pin": result.pin})
            return
        if output is None:
            out.print(result.text, markup=False, highlight=False, end="")
        for item in result.left:
            err.print(f"[yellow]warning[/]: {escape(str(file))}:{item.source.line or ''} {escape(item.source.key)}: "
                      f"not mapped: {escape(item.reason)}")
        said = f"wrote {escape(str(output))}" if output is not None else "printed the recipe"
        err.print(f"{said} ({result.format} recipe, {len(result.placed)} value(s) mapped, {len(result.left)} "
                  f"key(s) not mapped); the image {escape(result.image_ref)} is unpinned: run `{escape(result.pin)}`")


def _write(path: Path, text: str) -> None:
    """Create the file (never replacing one: O_EXCL), readable like a file the user wrote."""
    try:
        handle = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o644)
    except FileExistsError:
        raise BadInput(f"{path} exists: nothing was written; give another -o, or move that file away first") from None
    except OSError as exc:
        raise BadInput(f"{path}: cannot create it ({exc.strerror})") from None
    with os.fdopen(handle, "w", encoding="utf-8") as stream:
        stream.write(text)
