"""The one shape of every command's `--json`: `{"ok", "result", "error"}` (json_contract.schema.json).

Built here and only here, so a program reading any command reads one contract: the command's own result
(its old `ok` lifted out), and on failure one error object naming code, message, fix, node, file, line and
key, taken from the exception the command ended with (a config issue's file/line/key, a node error's node,
the `; fix: ` half of a message). Times are ISO 8601 with zone everywhere: a number under a key `at` or
`*_at` is epoch seconds and is written as UTC, a datetime as itself (naive ones read as UTC)."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from datetime import date, datetime, timezone
from enum import Enum, StrEnum
from importlib.resources import files
from pathlib import PurePath
from typing import Any

from ..config.message import FIX
from ..config.source import ConfigError, ConfigIssue

SCHEMA_FILE = "json_contract.schema.json"


def schema() -> dict:
    """The contract as JSON Schema (draft 2020-12), as shipped in the package."""
    return json.loads(files(__package__).joinpath(SCHEMA_FILE).read_text())


class ErrorCode(StrEnum):
    """Why a command failed, coarser than its message and stable for programs to branch on."""

    BAD_INPUT = "bad-input"
    FAILED = "failed"
    REFUSED = "refused"
    INTERRUPTED = "interrupted"
    BUG = "bug"

    @property
    def meaning(self) -> str:
        return {"bad-input": "exit 2: the command line, a recipe, an inventory or the config file; nothing changed",
                "failed": "exit 1: a check or a deployment failed, or a node could not be reached",
                "refused": "exit 1: the deploy lock, the cluster's identity or a safety refusal said no; nothing "
                           "changed",
                "interrupted": "exit 130 (Ctrl-C) or 143 (SIGTERM), after the command undid or stopped its work",
                "bug": "exit 1: an exception the tool did not expect, named as a bug (`--debug` shows it)",
                }[self.value]


@dataclass
class JsonError:
    """The error object; None where unknown. `more`: the further issues of a many-issue config error."""

    code: ErrorCode
    exit_code: int
    message: str
    fix: str | None = None
    node: str | None = None
    file: str | None = None
    line: int | None = None
    key: str | None = None
    more: list["JsonError"] = field(default_factory=list)

    def as_dict(self) -> dict:
        return {"code": str(self.code), "exit_code": self.exit_code, "message": self.message, "fix": self.fix,
                "node": self.node, "file": self.file, "line": self.line, "key": self.key,
                "more": [m.as_dict() for m in self.more]}


def split_fix(text: str) -> tuple[str, str | None]:
    """`problem; fix: what to do` (config/message.py's one shape) as (problem, fix)."""
    problem, sep, fix = text.partition(FIX)
    return (problem, fix) if sep else (text, None)


def issue_error(issue: ConfigIssue, exit_code: int) -> JsonError:
    message, fix = split_fix(issue.message)
    return JsonError(ErrorCode.BAD_INPUT, exit_code, message, fix, None, issue.file, issue.line, issue.key or None)


def error_of(exc: BaseException | None, code: ErrorCode, exit_code: int, message: str) -> JsonError:
    """The error object for `exc` (None: a plain non-zero exit). A ConfigError gives its first issue's
    location, the rest in `more`; a node is looked for along the cause chain (NodeError.node, a GroupError
    or StepFailed of exactly one node)."""
    if isinstance(exc, ConfigError) and exc.issues:
        first, *rest = [issue_error(i, exit_code) for i in exc.issues]
        first.more = rest
        return first
    text, fix = split_fix(message)
    return JsonError(code, exit_code, text, fix, node=_node_of(exc))


def _node_of(exc: BaseException | None) -> str | None:
    seen: set[int] = set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        node = getattr(exc, "node", None)
        if isinstance(node, str) and node:
            return node
        for many in (getattr(exc, "nodes", None), list(getattr(exc, "failures", None) or {})):
            if isinstance(many, (list, tuple)) and len(many) == 1 and isinstance(many[0], str):
                return many[0]
        exc = exc.__cause__ or exc.__context__
    return None


_NO_RESULT = object()


class Envelope:
    """This invocation's JSON: the result the command gave (emit_json, or an event stream's result event),
    the error it ended with (the first one said), and whether a stream is being written (then the envelope
    is its last line, compact)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.result: Any = _NO_RESULT
        self.result_ok: bool | None = None
        self.error: JsonError | None = None
        self.streaming = False
        self.written = False

    def fail(self, error: JsonError) -> None:
        if self.error is None:
            self.error = error

    def give(self, data: Any) -> None:
        """The command's result; a dict's own `ok` becomes the envelope's."""
        if isinstance(data, dict) and "ok" in data:
            data = dict(data)
            self.result_ok = bool(data.pop("ok"))
        self.result = data

    def document(self, error: JsonError | None = None) -> dict:
        result = None if self.result is _NO_RESULT else self.result
        error = error or self.error
        if error is None and self.result_ok is False:  # it said it failed but ended without an exception
            error = JsonError(ErrorCode.FAILED, 1, said_failure(result))
        return {"ok": error is None, "result": normalized(result),
                "error": error.as_dict() if error is not None else None}

    def text(self, error: JsonError | None = None) -> str:
        doc = self.document(error)
        if self.streaming:
            return json.dumps(doc, default=str) + "\n"
        return json.dumps(doc, indent=2, default=str) + "\n"


def said_failure(result: Any, otherwise: str = "the command's result says it failed (see result)") -> str:
    """What a result that says ok=false names as its failure: its `error`, else its problems, else that."""
    if isinstance(result, dict):
        if isinstance(result.get("error"), str) and result["error"]:
            return result["error"]
        problems = result.get("problems")
        if isinstance(problems, list) and problems:
            return "; ".join(str(p) for p in problems)
    return otherwise


def is_time_key(key: Any) -> bool:
    return isinstance(key, str) and (key == "at" or key.endswith("_at"))


def iso(value: float | datetime) -> str:
    if isinstance(value, datetime):
        return (value if value.tzinfo else value.replace(tzinfo=timezone.utc)).isoformat()
    return datetime.fromtimestamp(value, timezone.utc).isoformat()


def normalized(value: Any, key: Any = None) -> Any:
    """JSON-ready: times as ISO 8601 with zone, enums and paths as strings, tuples and sets as lists."""
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, datetime):
        return iso(value)
    if isinstance(value, date):
        return value.isoformat()
    if isinstance(value, (int, float)) and is_time_key(key) and not isinstance(value, Enum):
        return iso(value) if math.isfinite(value) and value > 0 else None
    if isinstance(value, Enum):
        return value.value if isinstance(value.value, (int, float)) and not isinstance(value, StrEnum) else str(value)
    if isinstance(value, PurePath):
        return str(value)
    if isinstance(value, dict):
        return {str(k): normalized(v, k) for k, v in value.items()}
    if isinstance(value, (list, tuple, set, frozenset)):
        return [normalized(v, key) for v in value]
    return value
