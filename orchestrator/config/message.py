"""The one shape every config error has: `problem; fix: what to write instead` (the corpus test holds it).

Its own module so that forms (whose DOCKER_SIZE hints reads) can write a message without importing hints."""

from __future__ import annotations

FIX = "; fix: "


def fixed(problem: str, fix: str) -> str:
    """A message with its fix, in the one shape every config error has."""
    return f"{problem}{FIX}{fix}"
