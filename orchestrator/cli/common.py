"""What every command shares: option types, consoles, and turning errors into exit codes."""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
from contextlib import contextmanager
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Iterator, Optional

import typer
from rich.console import Console
from typer._click.core import ParameterSource

from ..config.source import ConfigError
from ..interrupts import (first_interrupt, forget_interrupts, interrupt_reason, remember_interrupt,
                           signals_interrupt)
from . import user_config
from .json_contract import Envelope, ErrorCode, error_of, normalized, said_failure

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

# Piped output is read by people later (logs, CI): do not squeeze it into 80 columns.
out = Console(highlight=False, soft_wrap=True, emoji=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)

_CLUSTER_META = "spark_deploy.cluster"


def _remember_cluster(ctx: typer.Context, param, value: str | None) -> str | None:
    """-c is eager: it is read before -i, whose callback decides between them."""
    ctx.meta[_CLUSTER_META] = (value, ctx.get_parameter_source(param.name))
    return value


def _resolve_inventory(ctx: typer.Context, param, value: Path | None) -> Path:
    """Which inventory: -i or -c on the command line, then their env vars, then the config file's default,
    then ./inventory.yaml (orchestrator/cli/user_config.py). A bad config file or name is bad input (2)."""
    source = ctx.get_parameter_source(param.name)
    name, name_source = ctx.meta.get(_CLUSTER_META, (None, None))
    cmdline, env = ParameterSource.COMMANDLINE, ParameterSource.ENVIRONMENT
    try:
        for level in (cmdline, env):
            given_i, given_c = value is not None and source is level, name is not None and name_source is level
            if given_i and given_c:
                where = "on the command line" if level is cmdline else "in the environment"
                raise typer.BadParameter(f"-i {value} and -c {name} both given {where}: give one")
            if given_i:
                return value
            if given_c:
                return user_config.cluster_inventory(user_config.load(), name)
        return user_config.load().inventory or user_config.DEFAULT_INVENTORY
    except ConfigError as exc:
        raise typer.BadParameter("; ".join(str(i) for i in exc.issues)) from None


InventoryOpt = Annotated[
    Optional[Path],
    typer.Option("--inventory", "-i", envvar="SPARK_DEPLOY_INVENTORY", callback=_resolve_inventory,
                 help="The inventory of nodes (default: the config file's `inventory`, else ./inventory.yaml).",
                 show_default=False),
]
ClusterOpt = Annotated[
    Optional[str],
    typer.Option("--cluster", "-c", envvar="SPARK_DEPLOY_CLUSTER", is_eager=True, callback=_remember_cluster,
                 help="A cluster named in ~/.config/spark-deploy/config.yaml, instead of -i PATH.",
                 show_default=False),
]
RecipeArg = Annotated[Path, typer.Argument(help="The recipe YAML file.", show_default=False)]
SetOpt = Annotated[
    Optional[list[str]],
    typer.Option("--set", help="Set a recipe key as if the file said it: dotted KEY=VALUE (vllm.max_model_len=8192), "
                               "VALUE read as YAML; repeatable, the last wins. Validated like the file; a release "
                               "records the recipe with it (`history --recipe N`).", show_default=False),
]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output: one JSON object on stdout, "
                                                       "{ok, result, error} (event streams: one object per line, the "
                                                       "last that one).")]
YesOpt = Annotated[bool, typer.Option("--yes", "-y", help="Do not ask: answer yes to the confirmation.")]
NodeOpt = Annotated[Optional[str], typer.Option("--node", help="Only this node.", show_default=False)]
TailOpt = Annotated[Optional[int], typer.Option("--tail", min=1, help="Only the last N lines.", show_default=False)]


class Refusal(StrEnum):
    """The safety refusals `--force` overrides, each by its name: `--force` overrides only the one its command
    names, and the refusal's message says which (refused())."""

    LIVE_LOCK = "live-lock"
    WINDOW_OPEN = "window-open"
    BLOCKING_CHANGES = "blocking-changes"

    @property
    def command(self) -> str:
        return {"live-lock": "lock release", "window-open": "maintenance begin",
                "blocking-changes": "maintenance end"}[self.value]

    @property
    def guards(self) -> str:
        return {"live-lock": "the deploy lock's owner may still be alive",
                "window-open": "a maintenance window is open: its baseline would be replaced",
                "blocking-changes": "verify found changes the serving release depends on"}[self.value]


def force_opt(refusal: Refusal, what: str):
    """The `--force` option of a command that has one safety refusal to override."""
    return Annotated[bool, typer.Option("--force", help=f"Override the '{refusal}' refusal: {what}.")]


def refused(refusal: Refusal, why: str) -> "Failed":
    return Failed(f"refused ({refusal}): {why}; --force overrides this refusal")


def can_ask(as_json: bool = False) -> bool:
    """A question needs a person at a terminal; --json output is for programs, which are never asked."""
    return not as_json and sys.stdin.isatty() and sys.stderr.isatty()


def confirm(question: str, yes: bool, as_json: bool = False) -> None:
    """`--yes` = do not ask. Otherwise ask on a terminal; with no terminal (or --json), refuse naming --yes.
    Nothing has been changed when this refuses (exit 1)."""
    if yes:
        return
    if can_ask(as_json):
        if typer.confirm(question, default=False, err=True):
            return
        raise Failed(f"not confirmed: {question} (nothing was changed)")
    raise Failed(f"{question} — not asked without a terminal: rerun with --yes (nothing was changed)")


class BadInput(Exception):
    """A problem with what the user asked for (exit 2), outside the YAML files themselves."""


class Failed(Exception):
    """A check or a deployment failed (exit 1); the message says where and why."""


class FailedAsShown(Exception):
    """A failure the command's own output already showed (its table, its verdict): exit 1 with nothing more
    on stderr; the message (and the one node, when it is one) is what the --json error object says."""

    def __init__(self, message: str, node: str | None = None):
        super().__init__(message)
        self.node = node


def only_node(nodes) -> str | None:
    """The node a failure is on, when it is exactly one."""
    nodes = sorted(set(nodes))
    return nodes[0] if len(nodes) == 1 else None


# This invocation's --json: the one envelope (cli/json_contract.py) every command's JSON goes through.
ENVELOPE = Envelope()


def emit_json(data) -> None:
    """The command's result under --json: written once, in the envelope, when the command ends (exit_codes)."""
    ENVELOPE.give(data)


class JsonLines:
    """stdout for an event stream (runner/sinks.JsonSink): one object per line, its `result` event kept as the
    command's result, so the stream ends with the envelope (written by exit_codes) and nothing after it."""

    def __init__(self) -> None:
        ENVELOPE.streaming = True

    def write(self, text: str) -> int:
        kept = []
        for line in text.splitlines(keepends=True):
            try:
                said = json.loads(line) if line.strip() else None
            except ValueError:
                said = None
            if isinstance(said, dict) and said.get("event") == "result":
                said.pop("event")
                ENVELOPE.give(said)
            else:
                kept.append(line)
        return sys.stdout.write("".join(kept))

    def flush(self) -> None:
        sys.stdout.flush()


def stream_json(obj) -> None:
    """One line of an event stream outside the runner's events (`watch` samples): compact, normalized."""
    ENVELOPE.streaming = True
    sys.stdout.write(json.dumps(normalized(obj), default=str) + "\n")
    sys.stdout.flush()


_DEBUG = {"flag": False}  # this invocation's --debug (set by the app's callback at every invocation)


def set_debug(flag: bool) -> None:
    _DEBUG["flag"] = flag
    if debugging():  # paramiko's own log (a failed handshake's traceback) is shown only when asked for
        import logging

        logging.getLogger("paramiko").addHandler(logging.StreamHandler(sys.stderr))


def debugging() -> bool:
    """`spark-deploy --debug ...` or SPARK_DEPLOY_DEBUG=1: print the traceback behind an error too."""
    return _DEBUG["flag"] or os.environ.get("SPARK_DEPLOY_DEBUG", "") == "1"


def print_traceback(exc: BaseException) -> None:
    """The whole cause chain, and the traceback of every node's own failure inside a GroupError."""
    import traceback

    from ..transport.group import GroupError

    sys.stderr.write("".join(traceback.format_exception(exc)))
    seen: BaseException | None = exc
    visited: set[int] = set()
    while seen is not None and id(seen) not in visited:  # a context chain can loop
        visited.add(id(seen))
        if isinstance(seen, GroupError):
            for node, failure in seen.failures.items():
                sys.stderr.write(f"--- {node}:\n" + "".join(traceback.format_exception(failure)))
        seen = seen.__cause__ or seen.__context__
    sys.stderr.flush()


@contextmanager
def exit_codes(as_json: bool = False) -> Iterator[None]:
    """Map the tool's exceptions to exit codes; a traceback is never the message a user gets unless they
    ask (--debug). An exception the tool did not expect is a bug: named, exit 1, its traceback on --debug.
    With --json, stdout holds one envelope {"ok", "result", "error"} written here when the command ends
    (an event stream's last line), its error object made from the exception (cli/json_contract.py).
    A command that a SIGINT or SIGTERM reached exits 130 or 143 (128 + the signal), whatever it made of the
    interrupt (a failure after its undo, a quiet stop), so a script can tell "stopped" from "failed"."""
    ENVELOPE.reset()
    forget_interrupts()
    try:
        with _interrupts_remembered():
            with _mapped(as_json):
                yield
            code = _interrupted_code(EXIT_OK)
            if code:  # it stopped quietly (`logs -f`) or finished, but a signal reached it
                _json_error(None, ErrorCode.INTERRUPTED, code, f"interrupted ({signal.Signals(code - 128).name})")
                raise typer.Exit(code)
    finally:
        if as_json and not ENVELOPE.written:  # the one object (a stream's last line), success or not
            ENVELOPE.written = True
            sys.stdout.write(ENVELOPE.text())
            sys.stdout.flush()


@contextmanager
def _interrupts_remembered() -> Iterator[None]:
    """SIGINT and SIGTERM still at Python's defaults raise Interrupted and are remembered (transport/cancel.py),
    so SIGTERM unwinds like Ctrl-C. A handler a command set first (`up`'s SIG_IGN) is left alone."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    ours = tuple(sig for sig, default in defaults.items() if signal.getsignal(sig) is default)
    with signals_interrupt(ours):
        yield


def _interrupted_code(code: int) -> int:
    """128 + the first signal that reached this command, else `code`."""
    sig = first_interrupt()
    return 128 + int(sig) if sig is not None else code


@contextmanager
def _mapped(as_json: bool) -> Iterator[None]:
    from typer.exceptions import Abort, Exit, TyperException

    from ..bugs import unexpected

    try:
        yield
    except ConfigError as exc:
        _debug(exc)
        for issue in exc.issues:
            err.print(f"[bold red]error[/]: {_escape(str(issue))}")
        _json_error(exc, ErrorCode.BAD_INPUT, _interrupted_code(EXIT_BAD_INPUT), str(exc))
        raise typer.Exit(_interrupted_code(EXIT_BAD_INPUT)) from None
    except BadInput as exc:
        _debug(exc)
        err.print(f"[bold red]error[/]: {_escape(str(exc))}")
        _json_error(exc, ErrorCode.BAD_INPUT, _interrupted_code(EXIT_BAD_INPUT), str(exc))
        raise typer.Exit(_interrupted_code(EXIT_BAD_INPUT)) from None
    except (Exit, Abort, TyperException) as exc:  # the command line's own ends (typer.Exit is a RuntimeError)
        given = getattr(exc, "exit_code", EXIT_FAILED)
        code = _interrupted_code(given)
        if code:
            _json_error(None, ErrorCode.INTERRUPTED if code != given else ErrorCode.FAILED, code,
                        f"interrupted ({signal.Signals(code - 128).name})" if code != given
                        else said_failure(ENVELOPE.result, f"exit {code}"))
        if code != given:
            raise typer.Exit(code) from None
        raise
    except FailedAsShown as exc:
        _json_error(exc, ErrorCode.FAILED, _interrupted_code(EXIT_FAILED), str(exc))
        raise typer.Exit(_interrupted_code(EXIT_FAILED)) from None
    except KeyboardInterrupt as exc:  # an interrupt nothing caught (`watch`): said as one, 128 + its signal
        name = getattr(exc, "signal_name", "SIGINT")
        if first_interrupt() is None:  # a KeyboardInterrupt no handler of ours raised
            remember_interrupt(signal.Signals[name])
        err.print(interrupt_reason(exc))
        _json_error(exc, ErrorCode.INTERRUPTED, _interrupted_code(EXIT_FAILED), interrupt_reason(exc))
        raise typer.Exit(_interrupted_code(EXIT_FAILED)) from None
    except Exception as exc:  # noqa: BLE001 - a bug: said as one, never a bare traceback
        _debug(exc)
        code = _interrupted_code(EXIT_FAILED)
        if isinstance(exc, Failed) or _refused(exc):  # the nodes or the lock said no: nothing was changed
            err.print(f"[bold red]failed[/]: {_escape(str(exc))}")
            _json_error(exc, ErrorCode.REFUSED if _refused(exc) or str(exc).startswith("refused (")
                        else ErrorCode.FAILED, code, str(exc))
            raise typer.Exit(code) from None
        err.print(f"[bold red]failed[/]: {_escape(unexpected(exc))}")
        _json_error(exc, ErrorCode.BUG, code, unexpected(exc))
        raise typer.Exit(code) from None


_REFUSALS = (("operation.operation", "OperationRefused"), ("releases.lock", "LockError"),
             ("releases.identity", "IdentityMismatch"))


def _refused(exc: BaseException) -> bool:
    """An OperationRefused or a LockError. Looked up among the loaded modules, not imported: such an exception
    exists only once its module was, and `validate` or `--help` must not pay for importing the transport."""
    root = __name__.split(".")[0]
    for module, name in _REFUSALS:
        cls = getattr(sys.modules.get(f"{root}.{module}"), name, None)
        if cls is not None and isinstance(exc, cls):
            return True
    return False


def _json_error(exc: BaseException | None, code: ErrorCode, exit_code: int, message: str) -> None:
    """The envelope's error object (an exit of 128 + a signal is an interruption, whatever failed with it)."""
    ENVELOPE.fail(error_of(exc, code if exit_code < 128 else ErrorCode.INTERRUPTED, exit_code, message))


def _debug(exc: BaseException) -> None:
    if debugging():
        print_traceback(exc)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)

