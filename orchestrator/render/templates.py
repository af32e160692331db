"""Jinja2 templates that emit one JSON-encoded argv token per line; this turns them into lists."""

from __future__ import annotations

import json
import os
from functools import lru_cache
from pathlib import Path

import jinja2

TEMPLATE_DIR = Path(os.environ.get("SPARK_DEPLOY_TEMPLATES", Path(__file__).resolve().parents[2] / "templates"))


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(str(TEMPLATE_DIR)),
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
        autoescape=False,
        keep_trailing_newline=True,
    )


def render_tokens(template: str, **context) -> list[str]:
    """Render `template` and decode each non-blank line as one JSON string token."""
    text = environment().get_template(template).render(**context)
    tokens = []
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip():
            continue
        token = json.loads(line)
        if not isinstance(token, str):
            raise TypeError(f"{template}:{number}: a token must render as a JSON string, got {line!r}")
        tokens.append(token)
    return tokens
