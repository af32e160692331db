"""Telling a bug from a failure: what only a mistake in the tool raises, and how its message reads.

A refused connection, a full disk or a node's bad answer raise the tool's own errors or the OS's; a
KeyError or a TypeError out of a step is a bug in it. Its message names the exception (a KeyError's text
is only the key) and says where the traceback is: the cause stays chained, and `--debug` (or
SPARK_DEPLOY_DEBUG=1) prints it.
"""

from __future__ import annotations

BUGS = (LookupError, AttributeError, TypeError, NameError, AssertionError, ArithmeticError, RecursionError,
        NotImplementedError)


def unexpected(exc: BaseException) -> str:
    return (f"unexpected {type(exc).__name__}: {exc} (a bug in spark-deploy: run again with --debug or "
            "SPARK_DEPLOY_DEBUG=1 for the traceback)")


def is_bug(exc: BaseException) -> bool:
    """One of BUGS, and not one of the tool's own exceptions (which may subclass them on purpose)."""
    return isinstance(exc, BUGS) and not type(exc).__module__.startswith("orchestrator")
