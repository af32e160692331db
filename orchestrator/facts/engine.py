"""The docker facts of a gathering answered by ONE process on the node talking to the Docker Engine API.

A fact that names an `api` op (facts.Fact.api) keeps its CLI script and its parser; in a gathering, every
such fact of a node rides in one `@engine` entry of the driver: python3 runs engine_probe.py, which asks
the engine over /var/run/docker.sock (the docker group may read it) and prints each fact framed exactly as
the driver frames a script's output, with the same text the CLI call printed (the Engine API's JSON is
what `docker inspect`/`docker info` print). Where python3 is missing or the socket refused, the same
entry runs those facts' CLI scripts through the driver instead: one round trip either way, the same
parsers, the fallback said in the `@engine` frame (and by each fact's Observed.source).
"""

from __future__ import annotations

import shlex
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .core import Fact, FactInput

ENGINE = "@engine"
PROGRAM = (Path(__file__).parent / "engine_probe.py").read_text()
FALLBACK = 3  # engine_probe's exit code when the socket cannot be used


class Op(StrEnum):
    """engine_probe.OPS: what the node-side program can answer (each the text of one fact's CLI script)."""

    INFO = "info"
    SERVER_VERSION = "server_version"
    IMAGE_DISK = "image_disk"
    IMAGES = "images"
    RECIPE_OR_NAMED = "recipe_or_named"
    INSPECT_LINES = "inspect_lines"


def script(driver: str) -> str:
    """The `@engine` entry's constant script: "$1" = how many of the remaining args are engine_probe's,
    then those, then the driver's arguments of the same facts' CLI scripts (run only on the fallback)."""
    return (f'n=$1; shift\n'
            f'if command -v python3 >/dev/null 2>&1; then\n'
            f'  python3 -I -S -c {shlex.quote(PROGRAM)} "${{@:1:$n}}" && exit 0\n'
            f'else\n'
            f"  printf '\\036F {ENGINE} 127\\nno python3 on this node\\n\\036E\\n'\n"
            f'fi\n'
            f'shift "$n"\n'
            f'exec bash -c {shlex.quote(driver)} driver "$@"')


def probe_args(facts: list[Fact], given: FactInput) -> list[str]:
    """engine_probe's argv: (name, op, argc, args...) per fact."""
    argv: list[str] = []
    for f in facts:
        args = [str(a) for a in (f.api_args or f.args)(given)]
        argv += [f.name, str(f.api), str(len(args)), *args]
    return argv
