"""An acceptance check's vocabulary: the request it sends, the answer it gets, and the result it judges."""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from enum import StrEnum

from ..config.acceptance import AcceptanceSettings


class AcceptStatus(StrEnum):
    PASS = "pass"
    FAIL = "fail"
    CHANGED = "changed"  # greedy outputs differ from the previous release's: reported, not judged
    SKIP = "skip"  # not applicable here (says why): never a silent pass


@dataclass(frozen=True)
class Request:
    method: str
    path: str
    body: dict | None = None
    timeout: float = 60.0


@dataclass(frozen=True)
class Answer:
    """What came back: the HTTP status and the parsed JSON (None when there was no answer or no JSON)."""

    status: int | None
    body: dict | None
    text: str  # the raw answer, or why there was none

    @classmethod
    def parse(cls, status: int, raw: bytes) -> "Answer":
        text = raw.decode(errors="replace")
        try:
            body = json.loads(text)  # NaN/Infinity are read as floats: a judge must see them
        except ValueError:
            body = None
        return cls(status, body if isinstance(body, dict) else None, text)

    def excerpt(self, limit: int = 160) -> str:
        flat = self.text.strip().replace("\n", " ")
        return flat[:limit] + ("…" if len(flat) > limit else "")

    def problem(self) -> str | None:
        """Why this is not a usable 200 JSON answer, or None."""
        if self.status is None:
            return f"no answer: {self.text}"
        if self.status != 200:
            return f"HTTP {self.status}: {self.excerpt()}"
        if self.body is None or not self.body.get("choices"):
            return f"no choices in the answer: {self.excerpt()}"
        return None

    @property
    def choice(self) -> dict:
        return (self.body or {}).get("choices", [{}])[0] or {}

    @property
    def message(self) -> dict:
        return self.choice.get("message") or {}


@dataclass
class Result:
    name: str
    status: AcceptStatus
    seen: str  # what was seen, in a line
    advisory: bool = False
    data: dict = field(default_factory=dict)  # what later releases compare against (greedy outputs)

    @property
    def blocking(self) -> bool:
        """A failure that fails the release (an advisory one is only reported)."""
        return self.status is AcceptStatus.FAIL and not self.advisory

    def as_dict(self) -> dict:
        out = {"name": self.name, "status": str(self.status), "seen": self.seen, "advisory": self.advisory}
        return {**out, "data": self.data} if self.data else out


@dataclass(frozen=True)
class AcceptContext:
    """What the checks may depend on, read once from the recipe and the release history."""

    model: str
    max_model_len: int
    flags: dict  # the recipe's vllm.extra (tool-call-parser, reasoning-parser, ...)
    settings: AcceptanceSettings = AcceptanceSettings()
    previous: dict | None = None  # the previous release's greedy-digest data (same model), with "release"


def finite(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
