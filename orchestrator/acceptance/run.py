"""Run acceptance checks against the head's API: send what each check yields, hand it the answers.

Every check runs at once, each on its own thread, and a check's independent requests (a list it yields) go
together: the engine batches independent requests, so acceptance costs about its slowest check, not the sum
of all of them (benchmarks/bench_accept.py). The threads are daemons: an interrupted `up` or `accept` never
waits for an answer still on its way (up to a request's timeout)."""
from __future__ import annotations

import http.client
import json
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


class Sender:
    """One run's way to the engine: a request identical to one already sent (or on its way) in this run is
    not sent again, its answer is shared. Checks that can judge the same answer ask the same question (a
    greedy answer's logprobs and its text), so the engine decodes it once instead of batching a second copy
    beside every other check's requests (each running request makes a step dearer)."""

    def __init__(self, endpoint: Endpoint):
        self.endpoint = endpoint
        self.lock = threading.Lock()
        self.sent: dict[str, Future] = {}

    def start(self, req: Request) -> Future:
        key = json.dumps([req.method, req.path, req.body], sort_keys=True, default=repr)
        with self.lock:
            if key not in self.sent:
                self.sent[key] = spawn(send, self.endpoint, req)
            return self.sent[key]

    def one(self, req: Request) -> Answer:
        return self.start(req).result()

    def together(self, reqs: list[Request]) -> list[Answer]:
        """Independent requests sent at once; their answers in the same order."""
        return [f.result() for f in [self.start(r) for r in reqs]]


class InTurn(Sender):
    """Every request sent on the caller's thread, one after another, nothing shared (a caller that must not
    be entered from two threads, or a check measured alone)."""

    def one(self, req: Request) -> Answer:
        return send(self.endpoint, req)

    def together(self, reqs: list[Request]) -> list[Answer]:
        return [self.one(r) for r in reqs]


def drive(name: str, exchange, sender: Sender) -> Result:
    """Feed a check's generator the answers to its requests until it returns its Result; an answer of the
    wrong shape is that check's failure, naming the field."""
    req = next(exchange)
    while True:
        try:
            req = exchange.send(sender.together(req) if isinstance(req, list) else sender.one(req))
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


def one(name: str, check, ctx: AcceptContext, sender: Sender) -> Result:
    """One check's result: skipped (saying why) when it does not apply, else driven to its verdict."""
    if name in CHECKS:
        why = check.applies(ctx)
        if why:
            return Result(name, AcceptStatus.SKIP, f"not applicable: {why}")
        result = drive(name, check.exchange(ctx), sender)
        result.advisory = name in ctx.settings.advisory
        return result
    result = drive(name, custom_exchange(check)(ctx), sender)
    result.advisory = check.advisory
    return result


def run_checks(endpoint: Endpoint, ctx: AcceptContext, only: list[str] | None = None, on_result=None) -> list[Result]:
    """Every planned check at once; the results (and on_result, called on this thread) in the plan's order."""
    sender = Sender(endpoint)
    pending = [spawn(one, name, check, ctx, sender) for name, check in plan(ctx, only)]
    results = []
    for future in pending:
        result = future.result()
        results.append(result)
        if on_result:
            on_result(result)
    return results


def blocking(results: list[Result]) -> list[Result]:
    return [r for r in results if r.blocking]
