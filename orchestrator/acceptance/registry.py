"""Acceptance checks, registered by decorator like preflight's: each a generator that yields a Request (or a
list of independent ones, sent together), receives its Answer (or their list, in order) and returns a Result.
The generator does no I/O, so each check is unit-tested by feeding it answers; run.py sends the requests,
every check's at once.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Generator

from .model import AcceptContext, Answer, Request, Result

Exchange = Generator[Request | list[Request], Answer | list[Answer], Result]


@dataclass(frozen=True)
class Check:
    name: str
    guards: str  # what it guards against (docs/acceptance.md says more)
    default: bool  # in the default set (`up` runs it unless the recipe lists its own)
    applies: Callable[[AcceptContext], str | None]  # None, or why it does not apply here
    exchange: Callable[[AcceptContext], Exchange]


CHECKS: dict[str, Check] = {}


def always(_ctx: AcceptContext) -> None:
    return None


def acceptance(name: str, guards: str, default: bool = True,
               applies: Callable[[AcceptContext], str | None] = always):
    def register(fn: Callable[[AcceptContext], Exchange]):
        CHECKS[name] = Check(name, guards, default, applies, fn)
        return fn
    return register


def selected(ctx: AcceptContext, only: list[str] | None = None) -> list[str]:
    """The built-in checks to run: `only`, else the recipe's list, else the default set."""
    names = only if only is not None else ctx.settings.checks
    if names is None:
        return [c.name for c in CHECKS.values() if c.default]
    return list(names)
