"""Commands imported when they are used, not when `spark-deploy` starts (click's LazyGroup pattern).

Importing every command module costs about 0.6 s (paramiko, the deploy and bench packages, httpx, ...), so
`validate` would pay for `up`'s imports. The group knows each command by "module:attribute" and imports its
module only when the command is run, shown or listed in full; the top-level `--help` lists every command
with the first sentence of its docstring, read from the module's source (ast) without importing it.
tests/unit/test_cli_lazy.py holds the short help read this way to the loaded command's.
"""

from __future__ import annotations

import ast
import difflib
import importlib
import inspect
from dataclasses import dataclass
from functools import cache
from importlib.util import find_spec
from typing import Any

import typer
from typer import _click as click  # typer vendors its own click: its classes are these

from .conventions import ReadableGroup, make_readable

PACKAGE = __name__.rpartition(".")[0]


@dataclass(frozen=True)
class LazyCommand:
    """One command (a function) or a sub-command group (a typer.Typer) of `spark-deploy`, not yet imported."""

    name: str
    target: str  # "module:attribute" inside orchestrator.cli: a command function or a typer.Typer
    group_help: str | None = None  # a group's help (a function's help is its docstring)

    @property
    def module(self) -> str:
        return f"{PACKAGE}.{self.target.partition(':')[0]}"

    def load(self) -> click.Command:
        obj = getattr(importlib.import_module(self.module), self.target.partition(":")[2])
        if isinstance(obj, typer.Typer):
            info = typer.models.TyperInfo(obj, name=self.name,
                                          **({"help": self.group_help} if self.group_help else {}))
            return typer.main.get_group_from_info(info, pretty_exceptions_short=obj.pretty_exceptions_short,
                                                  rich_markup_mode=obj.rich_markup_mode,
                                                  suggest_commands=obj.suggest_commands)
        return typer.main.get_command_from_info(typer.models.CommandInfo(name=self.name, callback=obj),
                                                pretty_exceptions_short=True, rich_markup_mode=None)

    def short_help(self, limit: int = 45) -> str:
        """What the top-level help lists, without importing the command's module."""
        text = self.group_help if self.group_help is not None else _docstring(self.module, self.target.partition(":")[2])
        return click.utils.make_default_short_help(text or "", limit)


@cache
def _docstring(module: str, attribute: str) -> str:
    """The docstring of a module-level function or `sub_app(help=...)` in `module`, read from its source."""
    spec = find_spec(module)
    source = spec.loader.get_source(module) if spec and spec.loader else None  # type: ignore[union-attr]
    for node in ast.parse(source or "").body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == attribute:
            return ast.get_docstring(node) or ""
        if (isinstance(node, ast.Assign) and any(getattr(t, "id", None) == attribute for t in node.targets)
                and isinstance(node.value, ast.Call)):
            for kw in node.value.keywords:
                if kw.arg == "help":
                    return inspect.cleandoc(ast.literal_eval(kw.value))
    return ""


class LazyGroup(ReadableGroup):
    """The top-level group: its `lazy` commands are imported on first use, in the order registered."""

    lazy: dict[str, LazyCommand] = {}

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._loaded: dict[str, click.Command] = {}

    def list_commands(self, ctx: click.Context) -> list[str]:
        return [*super().list_commands(ctx), *(n for n in self.lazy if n not in self.commands)]

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        if cmd_name in self.lazy and cmd_name not in self.commands:
            if cmd_name not in self._loaded:
                self._loaded[cmd_name] = make_readable(self.lazy[cmd_name].load())
            return self._loaded[cmd_name]
        return super().get_command(ctx, cmd_name)

    def resolve_command(self, ctx: click.Context, args: list[str]):
        """typer's, with its "Did you mean" drawn from every command (typer looks only at the loaded ones)."""
        try:
            return self._click_resolve_command(ctx, args)
        except click.exceptions.UsageError as exc:
            meant = difflib.get_close_matches(args[0], self.list_commands(ctx)) if args and self.suggest_commands else []
            if meant:
                exc.message = f"{exc.message.rstrip('.')}. Did you mean {', '.join(repr(m) for m in meant)}?"
            raise

    def format_commands(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        """The command list of `--help`, each line's help read without importing the command."""
        limit = formatter.width - 6 - max((len(n) for n in self.list_commands(ctx)), default=0)
        rows = [(name, self.lazy[name].short_help(limit) if name in self.lazy and name not in self.commands
                 else self.get_command(ctx, name).get_short_help_str(limit))  # type: ignore[union-attr]
                for name in self.list_commands(ctx)]
        if rows:
            with formatter.section("Commands"):
                formatter.write_dl(rows)


def lazy_group(commands: list[LazyCommand]) -> type[LazyGroup]:
    """A LazyGroup class that knows `commands` (typer instantiates the class itself)."""
    return type("SparkDeployGroup", (LazyGroup,), {"lazy": {c.name: c for c in commands}})


def load_all(group: type[LazyGroup]) -> None:
    """Import every command's module now (a process that forks children to run commands does this once)."""
    for command in group.lazy.values():
        importlib.import_module(command.module)
