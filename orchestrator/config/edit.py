"""Small, comment-preserving edits of recipe files (ruamel round trip), written atomically."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from ruamel.yaml import YAML

from .load import load_recipe


def set_image_id(path: str | Path, image_id: str) -> None:
    """Set `image.id` in a recipe file, keeping its comments and key order; the result must still validate."""
    _set(path, "image", "id", image_id)


def set_image(path: str | Path, ref: str, image_id: str) -> None:
    """Set `image.ref` and `image.id` together (`upgrade`), the same way: one write, validated."""
    _set(path, "image", "ref", ref, also={"id": image_id})


def set_model_revision(path: str | Path, commit: str) -> None:
    """Set `model.revision` (to the commit `model pull --revision` resolved), the same way."""
    _set(path, "model", "revision", commit)


def _set(path: str | Path, section: str, key: str, value: str, also: dict[str, str] | None = None) -> None:
    path = Path(path)
    yaml = YAML()
    yaml.preserve_quotes = True
    doc = yaml.load(path.read_text(encoding="utf-8"))
    doc[section][key] = value
    for other, more in (also or {}).items():
        doc[section][other] = more
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
