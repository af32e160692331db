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


class Malformed(ValueError):
    """A well-formed answer of the wrong shape (a field missing, of the wrong type): the check that read it
    fails, naming the field; run.py turns it into that check's result."""


def shown(value, limit: int = 60) -> str:
    """A server's value as the output shows it: a repr, cut, so no control character reaches a terminal."""
    text = repr(value)
    return text[:limit] + ("…" if len(text) > limit else "")


@dataclass(frozen=True)
class Answer:
    """What came back: the HTTP status and the parsed JSON (None when there was no answer or no JSON)."""

    status: int | None
    body: dict | None
    text: str  # the raw answer, or why there was none
    json_kind: str | None = None  # what the JSON was when it was not an object ("a list"), None if no JSON

    @classmethod
    def parse(cls, status: int, raw: bytes) -> "Answer":
        text = raw.decode(errors="replace")
        try:
            body = json.loads(text)  # NaN/Infinity are read as floats: a judge must see them
        except (ValueError, RecursionError):
            return cls(status, None, text)
        if isinstance(body, dict):
            return cls(status, body, text)
        return cls(status, None, text, json_kind=f"a {type(body).__name__}")

    def excerpt(self, limit: int = 160) -> str:
        """The server's text, escaped (a repr) and cut: never its raw bytes."""
        flat = self.text.strip()
        cut = flat[:limit]
        return repr(cut) + ("…" if len(flat) > limit else "")

    def problem(self) -> str | None:
        """Why this is not a usable 200 JSON answer with a first choice, or None."""
        if self.status is None:
            return f"no answer: {self.text}"
        if self.status != 200:
            return f"HTTP {self.status}: {self.excerpt()}"
        if self.body is None:
            if self.json_kind:
                return f"the answer is JSON but {self.json_kind}, not an object: {self.excerpt()}"
            return f"the answer is not JSON: {self.excerpt()}"
        choices = self.body.get("choices")
        if not choices:
            return f"no choices in the answer: {self.excerpt()}"
        if not isinstance(choices, list) or not isinstance(choices[0], dict):
            return f"choices is {shown(choices)}, not a list of objects"
        return None

    @property
    def choice(self) -> dict:
        """The first choice (an object, once problem() is None; else empty)."""
        choices = (self.body or {}).get("choices")
        if isinstance(choices, list) and choices and isinstance(choices[0], dict):
            return choices[0]
        return {}

    @property
    def message(self) -> dict:
        """choices[0].message of a chat answer: Malformed when missing or not an object."""
        message = self.choice.get("message")
        if not isinstance(message, dict):
            said = "missing" if message is None else f"{shown(message)}, not an object"
            raise Malformed(f"choices[0].message is {said}")
        return message

    def text_of(self, key: str) -> str:
        """choices[0].text of a completion (required), or choices[0].message.KEY of a chat answer ("" when
        absent or null: content is null beside a tool call); Malformed when not text."""
        if key == "text":
            where, value = "choices[0]", self.choice.get(key)
            if value is None:
                raise Malformed("choices[0].text is missing" if key not in self.choice else
                                "choices[0].text is None, not a string")
        else:
            where, value = "choices[0].message", self.message.get(key)
        if value is None:
            return ""
        if not isinstance(value, str):
            raise Malformed(f"{where}.{key} is {shown(value)}, not a string")
        return value


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
