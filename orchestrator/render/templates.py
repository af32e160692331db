"""Jinja2 templates that emit one JSON-encoded argv token per line; this turns them into lists.

The templates are package data (`orchestrator/render/templates/`), loaded with a PackageLoader so a
non-editable install renders exactly what a checkout does.
"""

from __future__ import annotations

import json
from functools import lru_cache

import jinja2


@lru_cache(maxsize=1)
def environment() -> jinja2.Environment:
    return jinja2.Environment(
        loader=jinja2.PackageLoader("orchestrator.render", "templates"),
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
