"""What an import is made of: values placed in the recipe (with their origin), and source keys left out."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class PeerFormat(StrEnum):
    """The recipe formats `recipe import` reads."""

    SPARKRUN = "sparkrun"
    EUGR = "eugr"


@dataclass(frozen=True)
class Source:
    """Where a value came from in the peer's file: a key path (`defaults.max_model_len`) and its line."""

    key: str
    line: int | None

    def __str__(self) -> str:
        return f"{self.key} (line {self.line})" if self.line else self.key


@dataclass(frozen=True)
class Placed:
    """A value for one recipe key (`("vllm", "extra", "max-num-seqs")`), and what it was in the source."""

    target: tuple[str, ...]
    value: object
    source: Source
    note: str = ""  # said in the comment too, e.g. "ray -> mp"

    @property
    def comment(self) -> str:
        if not self.source.key:  # said by the import itself, not read from the source
            return self.note
        return f"from {self.source}" + (f": {self.note}" if self.note else "")


@dataclass(frozen=True)
class Left:
    """A source key not written into the recipe, and why (the verdict of vLLM's table, or what replaces it)."""

    source: Source
    reason: str

    def __str__(self) -> str:
        return f"{self.source}: {self.reason}"
