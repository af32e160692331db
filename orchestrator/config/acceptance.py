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

    name: Name = Field(description="The check's name (in messages, --check and `checks:`).", examples=["capital"])
    prompt: Text = Field(description="What is sent; the answer is greedy (temperature 0).",
                         examples=["The capital of France is"])
    expect: Text = Field(description="A substring the answer must contain, or `regex:` and a regular expression.",
                         examples=["Paris"])
    chat: bool = Field(True, description="true: /v1/chat/completions; false: /v1/completions.")
    max_tokens: int = Field(default=64, ge=1, le=4096, description="The answer's length bound.")
    advisory: bool = Field(False, description="true: a failure is reported but never fails the release.")


class AcceptanceSettings(_Model):
    """Which checks `up` and `accept` run against the serving API (docs/acceptance.md)."""

    checks: list[Name] | None = Field(None, description="The built-in checks to run (unset: the default set; []: "
                                      "only the recipe's own).")
    advisory: list[Name] = Field([], description="Built-in checks whose failure is reported but does not fail "
                                 "the release.")
    expect_identical: bool = Field(False, description="true: greedy-digest fails when the answers differ from the "
                                   "previous release's.")
    needle_tokens: int | None = Field(default=None, ge=64, le=1_000_000, description="The long-context check's "
                                      "prompt length (unset: from max_model_len, capped).")
    custom: list[CustomCheck] = Field([], description="The recipe's own checks: a prompt and what the answer must "
                                      "contain.")

    @field_validator("custom")
    @classmethod
    def _unique(cls, custom: list) -> list:
        names = [c.name for c in custom]
        if len(set(names)) != len(names):
            raise ValueError(fixed("custom check names must be unique", "rename one of the checks that share a name"))
        return custom
