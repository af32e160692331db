"""What every command shares: option types, consoles, and turning errors into exit codes."""

from __future__ import annotations

import json
import os
import sys
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated, Iterator

import typer
from rich.console import Console

from ..config.source import ConfigError

EXIT_OK, EXIT_FAILED, EXIT_BAD_INPUT = 0, 1, 2

# Piped output is read by people later (logs, CI): do not squeeze it into 80 columns.
out = Console(highlight=False, soft_wrap=True, emoji=False, width=None if sys.stdout.isatty() else 200)
err = Console(stderr=True, highlight=False, soft_wrap=True, emoji=False)

InventoryOpt = Annotated[
    Path,
    typer.Option("--inventory", "-i", envvar="SPARK_DEPLOY_INVENTORY", help="The inventory of nodes.",
                 show_default=True),
]
RecipeArg = Annotated[Path, typer.Argument(help="The recipe YAML file.", show_default=False)]
JsonOpt = Annotated[bool, typer.Option("--json", help="Machine-readable output on stdout.")]


class BadInput(Exception):
    """A problem with what the user asked for (exit 2), outside the YAML files themselves."""


class Failed(Exception):
    """A check or a deployment failed (exit 1); the message says where and why."""


def emit_json(data) -> None:
    sys.stdout.write(json.dumps(data, indent=2, default=str) + "\n")
    sys.stdout.flush()


_DEBUG = {"flag": False}  # this invocation's --debug (set by the app's callback at every invocation)


def set_debug(flag: bool) -> None:
    _DEBUG["flag"] = flag


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
def exit_codes() -> Iterator[None]:
    """Map the tool's exceptions to exit codes; a traceback is never the message a user gets unless they
    ask (--debug). An exception the tool did not expect is a bug: named, exit 1, its traceback on --debug."""
    from typer.exceptions import Abort, Exit, TyperException

    from ..bugs import unexpected
    from ..operation import OperationRefused
    from ..releases.lock import LockError

    try:
        yield
    except ConfigError as exc:
        _debug(exc)
        for issue in exc.issues:
            err.print(f"[bold red]error[/]: {_escape(str(issue))}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except BadInput as exc:
        _debug(exc)
        err.print(f"[bold red]error[/]: {_escape(str(exc))}")
        raise typer.Exit(EXIT_BAD_INPUT) from None
    except (Failed, OperationRefused, LockError) as exc:  # the nodes or the lock said no: nothing was changed
        _debug(exc)
        err.print(f"[bold red]failed[/]: {_escape(str(exc))}")
        raise typer.Exit(EXIT_FAILED) from None
    except (Exit, Abort, TyperException):  # the command line's own ends (typer.Exit is a RuntimeError)
        raise
    except Exception as exc:  # noqa: BLE001 - a bug: said as one, never a bare traceback
        _debug(exc)
        err.print(f"[bold red]failed[/]: {_escape(unexpected(exc))}")
        raise typer.Exit(EXIT_FAILED) from None


def _debug(exc: BaseException) -> None:
    if debugging():
        print_traceback(exc)


def _escape(text: str) -> str:
    from rich.markup import escape

    return escape(text)

