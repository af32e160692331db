"""Run acceptance checks against the head's API: send what each check yields, hand it the answers.

Every check runs at once, each on its own thread, and a check's independent requests (a list it yields) go
together: the engine batches independent requests, so acceptance costs about its slowest check, not the sum
of all of them (benchmarks/bench_accept.py). The threads are daemons: an interrupted `up` or `accept` never
waits for an answer still on its way (up to a request's timeout)."""
from __future__ import annotations

import http.client
import socket
import threading
import urllib.error
from concurrent.futures import Future
from typing import Callable

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


def spawn(fn: Callable, *args) -> Future:
    """fn(*args) on a daemon thread; its result (or exception) in the Future."""
    future: Future = Future()

    def work() -> None:
        future.set_running_or_notify_cancel()
        try:
            future.set_result(fn(*args))
        except BaseException as exc:  # noqa: BLE001 - handed to whoever reads the result
            future.set_exception(exc)
    threading.Thread(target=work, name=f"accept-{getattr(fn, '__name__', 'call')}", daemon=True).start()
    return future


def together(endpoint: Endpoint, reqs: list[Request]) -> list[Answer]:
    """Independent requests sent at once; their answers in the same order."""
    return [f.result() for f in [spawn(send, endpoint, r) for r in reqs]]


def in_turn(endpoint: Endpoint, reqs: list[Request]) -> list[Answer]:
    """The same, one after another (a caller that must not be entered from two threads)."""
    return [send(endpoint, r) for r in reqs]


def drive(name: str, exchange, endpoint: Endpoint, send_list=together) -> Result:
    """Feed a check's generator the answers to its requests until it returns its Result; an answer of the
    wrong shape is that check's failure, naming the field."""
    req = next(exchange)
    while True:
        try:
            req = exchange.send(send_list(endpoint, req) if isinstance(req, list) else send(endpoint, req))
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


def one(name: str, check, ctx: AcceptContext, endpoint: Endpoint) -> Result:
    """One check's result: skipped (saying why) when it does not apply, else driven to its verdict."""
    if name in CHECKS:
        why = check.applies(ctx)
        if why:
            return Result(name, AcceptStatus.SKIP, f"not applicable: {why}")
        result = drive(name, check.exchange(ctx), endpoint)
        result.advisory = name in ctx.settings.advisory
        return result
    result = drive(name, custom_exchange(check)(ctx), endpoint)
    result.advisory = check.advisory
    return result


def run_checks(endpoint: Endpoint, ctx: AcceptContext, only: list[str] | None = None, on_result=None) -> list[Result]:
    """Every planned check at once; the results (and on_result, called on this thread) in the plan's order."""
    pending = [spawn(one, name, check, ctx, endpoint) for name, check in plan(ctx, only)]
    results = []
    for future in pending:
        result = future.result()
        results.append(result)
        if on_result:
            on_result(result)
    return results


def blocking(results: list[Result]) -> list[Result]:
    return [r for r in results if r.blocking]
