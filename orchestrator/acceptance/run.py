"""Run acceptance checks against the head's API: send what each check yields, hand it the answers."""
from __future__ import annotations

import http.client
import socket
import urllib.error

from ..http_api.endpoint import Endpoint
from . import checks as _builtin  # noqa: F401 - registers the built-in checks
from .custom import custom_exchange
from .model import AcceptContext, AcceptStatus, Answer, Malformed, Request, Result, shown
from .registry import CHECKS, selected


class UnknownCheck(ValueError):
    """A check name neither built in nor the recipe's own (bad input)."""


def send(endpoint: Endpoint, req: Request) -> Answer:
    try:
        status, raw = endpoint.request(req.method, req.path, req.body, timeout=req.timeout)
    except urllib.error.URLError as exc:
        return Answer(None, None, str(getattr(exc.reason, "strerror", None) or exc.reason))
    except (socket.timeout, TimeoutError):
        return Answer(None, None, f"no answer within {req.timeout:.0f} s")
    except OSError as exc:
        return Answer(None, None, exc.strerror or str(exc))
    except http.client.HTTPException as exc:  # not HTTP at all (a binary or garbled answer)
        return Answer(None, None, f"not an HTTP answer ({type(exc).__name__}: {shown(str(exc))})")
    return Answer.parse(status, raw)


def drive(name: str, exchange, endpoint: Endpoint) -> Result:
    """Feed a check's generator the answers to its requests until it returns its Result; an answer of the
    wrong shape is that check's failure, naming the field."""
    req = next(exchange)
    while True:
        try:
            req = exchange.send(send(endpoint, req))
        except StopIteration as done:
            return done.value
        except Malformed as exc:
            return Result(name, AcceptStatus.FAIL, f"malformed answer: {exc}")


def plan(ctx: AcceptContext, only: list[str] | None = None) -> list[tuple[str, object]]:
    """(name, exchange factory) in order: the built-in ones selected, then the recipe's own."""
    names = selected(ctx, only)
    own = {c.name: c for c in ctx.settings.custom}
    unknown = [n for n in [*names, *ctx.settings.advisory] if n not in CHECKS and n not in own]
    if unknown:
        raise UnknownCheck(f"unknown acceptance check(s): {', '.join(unknown)} (built in: {', '.join(CHECKS)}; "
                           f"the recipe's own: {', '.join(own) or 'none'})")
    out = [(n, CHECKS[n]) for n in names if n in CHECKS]
    out += [(c.name, c) for c in ctx.settings.custom if only is None or c.name in only]
    return out


def run_checks(endpoint: Endpoint, ctx: AcceptContext, only: list[str] | None = None, on_result=None) -> list[Result]:
    results = []
    for name, check in plan(ctx, only):
        if name in CHECKS:
            why = check.applies(ctx)
            if why:
                result = Result(name, AcceptStatus.SKIP, f"not applicable: {why}")
            else:
                result = drive(name, check.exchange(ctx), endpoint)
                result.advisory = name in ctx.settings.advisory
        else:
            result = drive(name, custom_exchange(check)(ctx), endpoint)
            result.advisory = check.advisory
        results.append(result)
        if on_result:
            on_result(result)
    return results


def blocking(results: list[Result]) -> list[Result]:
    return [r for r in results if r.blocking]
