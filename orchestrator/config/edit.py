"""Small, comment-preserving edits of recipe files (ruamel round trip), written atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ruamel.yaml import YAML

from .load import load_recipe


def set_image_id(path: str | Path, image_id: str) -> None:
    """Set `image.id` in a recipe file, keeping its comments and key order; the result must still validate."""
    path = Path(path)
    yaml = YAML()
    yaml.preserve_quotes = True
    doc = yaml.load(path.read_text(encoding="utf-8"))
    doc["image"]["id"] = image_id
    handle, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            yaml.dump(doc, out)
        load_recipe(tmp)  # never replace a valid file with an invalid one
        os.chmod(tmp, path.stat().st_mode & 0o777)
        os.replace(tmp, path)
    except BaseException:
        os.unlink(tmp)
        raise
