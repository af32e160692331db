"""Run ordered steps; on any failure or interruption undo the completed ones in reverse, then raise once.

A step is appended to the undo list *before* it runs, so a step that fails half way undoes what it did
(each step records its own effects). A second interrupt during the undo stops it: the error then lists
exactly what is left on which node and the command that removes it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Generic, Protocol, TypeVar

from ..bugs import is_bug, unexpected
from ..transport.cancel import Cancelled, interrupt_reason
from ..transport.group import GroupError
from ..transport.node import NodeError
from .events import Events, Phase

C = TypeVar("C")


class Step(Protocol[C]):
    phase: Phase
    detail: str

    def run(self, ctx: C) -> None: ...

    def undo(self, ctx: C) -> None:
        """Reverse what run() did, including a run() that stopped half way; nothing when it did nothing."""

    def leftover(self, ctx: C) -> list[str]:
        """What would still be left if undo() never ran (for the message after a second interrupt)."""


class StepFailed(Exception):
    """One error for a failed run: the phase, the node(s) and the cause, plus what undoing did."""

    def __init__(self, phase: Phase | None, cause: str, nodes: list[str] | None = None, interrupted: bool = False):
        self.phase, self.cause, self.nodes, self.interrupted = phase, cause, nodes or [], interrupted
        self.undo_notes: list[str] = []
        self.restored: int | None = None  # `up`: the release that serves again after this failure
        self.restore_failed: str | None = None  # ... or why it could not be restored
        self.repair: str | None = None  # the one command that repairs what is left (an interrupted restore)
        super().__init__(cause)

    def __str__(self) -> str:
        text = f"during {self.phase or 'start'}: {self.cause}"
        if self.undo_notes:
            text += "\n" + "\n".join(self.undo_notes)
        return text


def classify(phase: Phase | None, exc: BaseException) -> StepFailed:
    """Any exception -> one StepFailed naming the node(s) where that is known."""
    if isinstance(exc, StepFailed):
        return exc
    if isinstance(exc, KeyboardInterrupt):  # Interrupted too: named by its signal, never SIGTERM as Ctrl-C
        return StepFailed(phase, interrupt_reason(exc), interrupted=True)
    if isinstance(exc, Cancelled):
        return StepFailed(phase, str(exc), interrupted=True)
    if isinstance(exc, GroupError):
        return StepFailed(phase, str(exc), sorted(exc.failures))
    if isinstance(exc, NodeError):
        return StepFailed(phase, str(exc), [exc.node])
    node = getattr(exc, "node", None)
    if is_bug(exc):
        return StepFailed(phase, unexpected(exc), [node] if isinstance(node, str) else [])
    cause = str(exc) if node is not None or type(exc).__module__.startswith("orchestrator") \
        else f"{type(exc).__name__}: {exc}"
    return StepFailed(phase, cause, [node] if isinstance(node, str) else [])


@dataclass
class Runner(Generic[C]):
    events: Events
    before_undo: Callable[[], object] | None = None  # e.g. a fresh cancel token: undo is new work
    announce: Callable[[StepFailed], object] | None = None  # before the undo: say what happens next
    done: list = field(default_factory=list)

    def run(self, steps: list, ctx: C) -> None:
        try:
            for step in steps:
                self.done.append(step)
                with self.events.phase(step.phase, step.detail):
                    step.run(ctx)
        except BaseException as exc:  # KeyboardInterrupt included: undo, then one error
            error = classify(self.events.current, exc)
            try:
                self.undo(ctx, error)
            except KeyboardInterrupt:  # a late second interrupt outside any step's undo: nothing is lost
                pass
            if error is exc:
                raise
            raise error from exc  # the cause kept: --debug prints its traceback

    def undo(self, ctx: C, error: StepFailed) -> None:
        """Undo completed steps in reverse; failures are collected; a second interrupt stops the undo.

        The undo phase ends "failed" when anything could not be undone, so `--json` and the audit log
        never read an incomplete cleanup as fine."""
        pending = list(reversed(self.done))
        self.done = []
        try:
            if self.before_undo is not None:
                self.before_undo()
            if self.announce is not None:
                self.announce(error)
            with self.events.phase(Phase.UNDO, f"undoing {len(pending)} step(s) after: {error.cause.splitlines()[0]}"):
                if not self._undo_all(ctx, error, pending):
                    raise _UndoIncomplete()
        except _UndoIncomplete:
            pass
        except KeyboardInterrupt:  # between the steps' own undos (the phase starting or ending): what is
            # still pending was not undone, and says so like an interrupt inside a step's undo does
            if not any(note.startswith("undo interrupted") for note in error.undo_notes):
                self._interrupted(ctx, error, pending)

    @staticmethod
    def _interrupted(ctx: C, error: StepFailed, pending: list) -> bool:
        left = [line for s in pending for line in s.leftover(ctx)]
        error.undo_notes.append("undo interrupted; left as it is:" if left else
                                "undo interrupted; nothing of this run was left")
        error.undo_notes += [f"  {line}" for line in left]
        return not left

    def _undo_all(self, ctx: C, error: StepFailed, pending: list) -> bool:
        complete = True
        while pending:
            step = pending[0]
            try:
                step.undo(ctx)
            except KeyboardInterrupt:
                return self._interrupted(ctx, error, pending)
            except Exception as exc:  # noqa: BLE001 - every undo failure is reported with the cause
                error.undo_notes.append(f"could not undo {step.phase}: {exc}")
                error.undo_notes += [f"  {line}" for line in step.leftover(ctx)]
                complete = False
            pending.pop(0)
        return complete


class _UndoIncomplete(Exception):
    """Ends the undo phase as failed; the details are already in the error's undo notes."""
