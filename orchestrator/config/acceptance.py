"""The recipe's `acceptance:` section: which checks `up` and `accept` run, and the recipe's own checks.

Nothing here shapes the launch, so it is left out of the recipe digest (like `preflight:`).
"""
from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field, field_validator

from .hints import fixed
from .types import Name, Text


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class CustomCheck(_Model):
    """A prompt and what its greedy answer must contain (a substring, or `regex:` a regular expression)."""

    name: Name
    prompt: Text
    expect: Text
    chat: bool = True
    max_tokens: int = Field(default=64, ge=1, le=4096)
    advisory: bool = False  # a failure is reported, never fails the release


class AcceptanceSettings(_Model):
    # None: the default set (acceptance/registry.DEFAULT); [] runs only the recipe's own checks
    checks: list[Name] | None = None
    advisory: list[Name] = []  # built-in checks whose failure is reported but does not fail the release
    expect_identical: bool = False  # greedy-digest FAILS when outputs differ from the previous release's
    needle_tokens: int | None = Field(default=None, ge=64, le=1_000_000)  # default: from max_model_len, capped
    custom: list[CustomCheck] = []

    @field_validator("custom")
    @classmethod
    def _unique(cls, custom: list) -> list:
        names = [c.name for c in custom]
        if len(set(names)) != len(names):
            raise ValueError(fixed("custom check names must be unique", "rename one of the checks that share a name"))
        return custom
