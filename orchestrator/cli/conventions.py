"""The help every command shows, held in one place: readable metavars (RECIPE, PATH, N, SECONDS instead of
typer's `{recipe}`, `<list[str]>`, `<float range>`), `-h` as well as `--help`, and `--version`.

Applied by the group class, so a command registered later by anyone gets the same help without doing
anything; tests/unit/test_cli_conventions.py walks every registered command and holds it.
"""

from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache, partial
from importlib import metadata
from typing import Any, Iterator

import typer
from typer import _click as click  # typer vendors its own click: its classes are these
from typer.core import TyperArgument, TyperGroup, TyperOption

from ..verbosity import Verbosity, set_level

CONTEXT_SETTINGS = {"help_option_names": ["-h", "--help"]}

# A name says more than a type: these option names get these metavars.
_BY_NAME = {"inventory": "PATH", "cluster": "NAME", "node": "NODE", "tail": "N", "since": "WHEN",
            "name": "NAME", "url": "URL", "model": "NAME", "reason": "TEXT",
            "overrides": "KEY=VALUE"}


def version() -> str:
    try:
        return metadata.version("spark-deploy")
    except metadata.PackageNotFoundError:  # a checkout run without installing: say so, never guess
        return "unknown (not installed)"


def version_callback(value: bool) -> None:
    if value:
        typer.echo(f"spark-deploy {version()}")
        raise typer.Exit(0)


def _metavar(param: click.Parameter) -> str:
    """The word a user reads for a value: the parameter's own name for arguments (RECIPE, RELEASE), the
    kind of value for options (PATH, N, SECONDS, one|two)."""
    desc = getattr(param, "type_descriptor", None)
    if isinstance(param, TyperArgument):
        return (param.name or "value").upper()
    if param.name in _BY_NAME:
        return _BY_NAME[param.name]
    if desc is not None and desc.is_choice and desc.choices:
        return "|".join(str(getattr(c, "value", c)) for c in desc.choices)
    annotation = getattr(desc, "annotation", None)
    args = getattr(annotation, "__args__", None) or ()
    if desc is not None and desc.is_tuple:
        return " ".join(_type_word(a, param) for a in args)
    if desc is not None and desc.is_list and args:
        annotation = args[0]
    return _type_word(annotation, param)


def _type_word(annotation: Any, param: click.Parameter) -> str:
    from pathlib import Path

    if annotation is Path:
        return "PATH"
    if annotation is int:
        return "N"
    if annotation is float:
        return "SECONDS" if any(w in (param.name or "") for w in ("timeout", "heartbeat", "warning", "bound",
                                                                   "interval", "wait")) else "NUMBER"
    return "TEXT"


class ReadableArgument(TyperArgument):
    """An argument shown as RECIPE (required) or [RECIPE] (optional), with no `<type>` after it."""

    def _usage_display_name(self) -> str:
        name = self.display_name_raw
        name = name if self.required else f"[{name}]"
        return name + ("..." if self.nargs != 1 else "")

    def display_type_rich(self, ctx: click.Context) -> str | None:
        return None


def examples_one_per_line(text: str) -> str:
    """click rewraps each paragraph of a help text, running `Example:` lines together: from a paragraph's
    first `Example` line on, keep its lines as they are (click's \\b marker)."""
    paragraphs = []
    for para in text.split("\n\n"):
        lines = para.strip("\n").splitlines()
        first = next((i for i, line in enumerate(lines) if line.strip().startswith("Example")), None)
        if first is None or para.lstrip("\n").startswith("\b"):
            paragraphs.append(para)
            continue
        if first:
            paragraphs.append("\n".join(lines[:first]))
        paragraphs.append("\b\n" + "\n".join(line.strip() for line in lines[first:]))
    return "\n\n".join(paragraphs)


_VERBOSITY_META = "spark_deploy.verbosity"


def _verbosity(ctx: click.Context, param: click.Parameter, value: bool) -> None:
    """-q and -v of this invocation, into orchestrator/verbosity.py (the terminal sink reads it)."""
    given = ctx.meta.setdefault(_VERBOSITY_META, {})
    given[param.name] = value
    if given.get("quiet") and given.get("verbose"):
        raise click.exceptions.BadParameter("give -q or -v, not both", ctx=ctx, param=param)
    set_level(Verbosity.QUIET if given.get("quiet") else Verbosity.VERBOSE if given.get("verbose")
              else Verbosity.NORMAL)


@lru_cache(maxsize=1)
def verbosity_options() -> tuple[click.Parameter, ...]:
    """`-q`/`-v`: every command has them, one meaning each (orchestrator/verbosity.py). Built by typer from a
    signature, then set to feed _verbosity instead of the command's function (they hold no state: one pair
    serves every command)."""
    holder = typer.Typer(add_completion=False)

    @holder.command()
    def _options(
        quiet: bool = typer.Option(False, "--quiet", "-q", help="Say only errors and the result (no phases, "
                                                               "progress, notes or warnings)."),
        verbose: bool = typer.Option(False, "--verbose", "-v", help="Say every check line as it is judged (the "
                                                                   "default sums up each phase's passing checks "
                                                                   "on its end line)."),
    ) -> None:
        pass

    params = tuple(p for p in typer.main.get_command(holder).params if p.name in ("quiet", "verbose"))
    for param in params:
        param.expose_value, param.callback = False, _verbosity
    return params


def make_readable(command: click.Command) -> click.Command:
    """Give every parameter of a command (and of a sub-group's commands, when asked for) a readable metavar,
    its help text one example per line, and a command (not a group) `-q`/`-v`."""
    if command.help:
        command.help = examples_one_per_line(command.help)
    if not hasattr(command, "list_commands") and not any(p.name == "quiet" for p in command.params):
        json_at = next((i for i, p in enumerate(command.params) if p.name == "as_json"), len(command.params))
        command.params[json_at:json_at] = list(verbosity_options())
    for param in command.params:
        if param.metavar is None and not getattr(param, "is_flag", False) and not getattr(param, "count", False):
            if isinstance(param, (TyperArgument, TyperOption)):
                param.metavar = _metavar(param)
        if type(param) is TyperArgument:
            param.__class__ = ReadableArgument  # same fields; only how it is shown differs
    if type(command) is TyperGroup:
        command.__class__ = ReadableGroup
    return command


def show_error(exc: click.exceptions.ClickException, file: Any = None, as_json: bool = False) -> None:
    """click's own words for a command-line mistake (usage, the --help hint), with the one prefix every error
    of the tool has: `error:` (click writes `Error:`). Asked with --json, stdout also gets the contract's
    envelope (cli/json_contract.py): the mistake is bad input, located at its option."""
    ctx = getattr(exc, "ctx", None)
    if as_json:
        _json_usage_error(exc)
    if isinstance(exc, click.exceptions.UsageError) and ctx is not None:
        hint = ""
        if ctx.command.get_help_option(ctx) is not None:
            hint = f"Try '{ctx.command_path} {ctx.help_option_names[0]}' for help.\n"
        click.echo(f"{ctx.get_usage()}\n{hint}", file=file, err=file is None, color=ctx.color)
    click.echo(f"error: {exc.format_message()}", file=file, err=file is None,
               color=ctx.color if ctx is not None else None)


def _json_usage_error(exc: click.exceptions.ClickException) -> None:
    import sys

    from .json_contract import Envelope, ErrorCode, JsonError

    param = getattr(exc, "param", None)
    opts = [o for o in getattr(param, "opts", []) if o.startswith("--")] if param is not None else []
    where = opts[0] if opts else getattr(param, "name", None)
    error = JsonError(ErrorCode.BAD_INPUT, exc.exit_code, exc.format_message(), file="command line" if where else None,
                      key=where)
    sys.stdout.write(Envelope().text(error))
    sys.stdout.flush()


@contextmanager
def _errors_said_as_ours(args: Any = ()) -> Iterator[None]:
    """A ClickException leaving the parser is shown by click's main (`e.show()`): give it ours."""
    try:
        yield
    except click.exceptions.ClickException as exc:
        exc.show = partial(show_error, exc, as_json="--json" in list(args or ()))  # type: ignore[method-assign]
        raise


class ReadableGroup(TyperGroup):
    """The group every spark-deploy command is looked up through: readable help for each, whoever added it,
    and click's parsing errors said with the tool's `error:` prefix."""

    def get_command(self, ctx: click.Context, cmd_name: str) -> click.Command | None:
        command = super().get_command(ctx, cmd_name)
        return make_readable(command) if command is not None else None

    def make_context(self, *args: Any, **kwargs: Any) -> click.Context:
        with _errors_said_as_ours(kwargs.get("args", args[1] if len(args) > 1 else ())):
            return super().make_context(*args, **kwargs)

    def invoke(self, ctx: click.Context) -> Any:
        with _errors_said_as_ours([*getattr(ctx, "_protected_args", ()), *ctx.args]):
            return super().invoke(ctx)


def sub_app(**kwargs: Any) -> typer.Typer:
    """A sub-command group (`boot`, `sim`, `maintenance`, ...) with the project's conventions."""
    return typer.Typer(cls=ReadableGroup, no_args_is_help=True, add_completion=False, pretty_exceptions_enable=False,
                       rich_markup_mode=None, context_settings=CONTEXT_SETTINGS, **kwargs)
