"""docs/cli.md, generated from the CLI itself: every command, argument, option and exit code, so the page
cannot say what the code does not do. `python -m orchestrator.cli.reference > docs/cli.md` writes it;
tests/unit/test_cli_reference.py fails when the page and the CLI differ.
"""

from __future__ import annotations

import inspect

import typer
from typer.core import TyperArgument

from . import user_config
from .common import Refusal
from .json_contract import ErrorCode

HEADER = """# The command line

Generated from the CLI by `python -m orchestrator.cli.reference > docs/cli.md`; a test fails when this page
and the CLI differ. The same text, per command: `spark-deploy COMMAND -h`.

## Conventions (every command)

- `-h` and `--help` show the help; `spark-deploy --version` the version; `spark-deploy --install-completion`
  installs shell completion (bash, zsh, fish), `--show-completion` prints it.
- `--json`: stdout holds one JSON object and nothing else (people's text goes to stderr): the envelope
  below. Commands that report events as they happen (`up`, `rollback`, `restart`, `prune`, `upgrade`,
  `maintenance begin|end`, `watch` without `--once`) print one JSON object per line, the last one the envelope.
- `-q` (`--quiet`): errors and the result only. The default: each phase with its progress, a phase's checks
  summed up on its end line (one that warns or fails in full). `-v` (`--verbose`): every check line.
  `--json` is not affected.
- `--yes` (`-y`) means one thing: do not ask. A command that asks (a confirmation on a terminal) refuses
  without a terminal, or with `--json`, and names `--yes`; nothing is changed then.
- `--force` means one thing: override the one named safety refusal of that command. The refusal's message
  says `refused (NAME)` and that `--force` overrides it.
- `-i PATH` / `-c NAME`: the inventory, or a cluster named in the config file (below).
- `--node NODE`, `--tail N`, `--since WHEN`: the same names and kinds of value wherever they appear.
- `spark-deploy --debug COMMAND` (or `SPARK_DEPLOY_DEBUG=1`) prints the traceback behind an error.

## Exit codes

| code | meaning |
|---|---|
| 0 | ok |
| 1 | a check or a deployment failed, a node refused or could not be reached, or a confirmation was not given; the message names node and cause |
| 2 | bad input: the command line, a file (named with line and key) or the config file |
| 130 | interrupted by Ctrl-C (SIGINT), after the command undid or stopped what it was doing (`up` and `rollback`: after the automatic restore) |
| 143 | interrupted by SIGTERM, the same way |

## `--json`: one output contract

Every command's `--json` ends with one object, `{"ok": bool, "result": ..., "error": ...}`:

- `ok`: true when the command did what it was asked (exit 0); then `error` is null.
- `result`: what the command found or did, in its own shape (an object, or a list for `render`, `history`,
  `audit`); null when it ended before it had one. Times in it are ISO 8601 strings with their zone
  (`2026-12-07T14:07:00+00:00`), every key `at` or `*_at`; ranks, world sizes, ports, sizes and counts are
  numbers.
- `error` (when `ok` is false): `code` (below), `exit_code`, `message`, `fix` (what to do instead, when the
  message says it), `node` (when the failure is on one node), `file`, `line` and `key` (where a bad input
  is: a recipe or inventory line, or `--set KEY`), and `more` (the further issues of the same bad input,
  each the same shape); null where unknown.

The JSON Schema of the contract ships in the package: `orchestrator/cli/json_contract.schema.json`.

{codes}
## Refusals `--force` overrides

| refusal | command | guards against |
|---|---|---|
"""

CONFIG = """
## The config file

"""


def _codes() -> str:
    rows = "".join(f"| `{c.value}` | {_cell(c.meaning)} |\n" for c in ErrorCode)
    return "| error code | when |\n|---|---|\n" + rows + "\n"


def _refusals() -> str:
    return "".join(f"| `{r.value}` | `{r.command}` | {r.guards} |\n" for r in Refusal)


def _config() -> str:
    doc = inspect.getdoc(user_config) or ""
    head, _, rest = doc.partition("\n\n")
    example, _, after = rest.partition("\n\n")
    return CONFIG + head + "\n\n```yaml\n" + inspect.cleandoc(example) + "\n```\n\n" + after + "\n\n"


def walk_commands(command, path: tuple[str, ...] = ()):
    """(path, command) for every runnable command below `command`, in the order `--help` lists them (the
    conventions test walks the CLI with this too)."""
    ctx = typer.Context(command)
    if hasattr(command, "list_commands"):
        for name in command.list_commands(ctx):
            yield from walk_commands(command.get_command(ctx, name), (*path, name))
    else:
        yield path, command


def _cell(text: str) -> str:
    return " ".join(str(text).split()).replace("|", "\\|")


def _help(text: str) -> tuple[str, list[str]]:
    """The help's prose, and its examples (the lines after the \\b marker that start with Example)."""
    prose, examples = [], []
    for para in text.split("\n\n"):
        lines = [line for line in para.splitlines() if line.strip() != "\b"]
        if any(line.strip().startswith("Example") for line in lines):
            examples += [line.strip().removeprefix("Example:").strip() for line in lines
                         if line.strip().startswith("Example")]
        else:
            prose.append(" ".join(line.strip() for line in lines))
    return "\n\n".join(p for p in prose if p), examples


def _default(param) -> str:
    if getattr(param, "is_flag", False):
        return ""
    value = param.default
    if value is None or value == "" or callable(value) or value == () or value == []:
        return ""
    return f"`{getattr(value, 'value', value)}`"


def _command(path: tuple[str, ...], command) -> str:
    ctx = typer.Context(command, info_name=" ".join(("spark-deploy", *path)))
    prose, examples = _help(command.help or "")
    usage = " ".join(("spark-deploy", *path, *command.collect_usage_pieces(ctx)))
    out = [f"### spark-deploy {' '.join(path)}", "", prose, "", "```", usage, "```", ""]
    args = [p for p in command.params if isinstance(p, TyperArgument)]
    if args:
        out += ["| argument | | help |", "|---|---|---|"]
        for a in args:
            shown = a.metavar or a.name.upper()
            out.append(f"| `{shown}` | {'required' if a.required else 'optional'} | {_cell(a.help or '')} |")
        out.append("")
    opts = [p for p in command.params if not isinstance(p, TyperArgument) and not p.hidden]
    out += ["| option | value | default | help |", "|---|---|---|---|"]
    for o in opts:
        names = ", ".join(f"`{n}`" for n in (*o.opts, *o.secondary_opts))
        value = "" if getattr(o, "is_flag", False) else f"`{o.metavar}`"
        env = f" (env `{o.envvar}`)" if o.envvar else ""
        out.append(f"| {names} | {value} | {_default(o)} | {_cell((o.help or '') + env)} |")
    out.append("| `-h`, `--help` | | | Show the help and exit. |")
    out.append("")
    if examples:
        out += ["```", *(e for e in examples), "```", ""]
    out += ["Exit codes: 0 ok, 1 failed, 2 bad input, 130 Ctrl-C, 143 SIGTERM.", ""]
    return "\n".join(out)


def render_reference(app: typer.Typer | None = None) -> str:
    if app is None:
        from .main import app
    root = typer.main.get_command(app)
    commands = list(walk_commands(root))
    index = ["## Commands", ""] + [f"- [`spark-deploy {' '.join(p)}`](#spark-deploy-{'-'.join(p)}): "
                                   f"{_cell(_help(c.help or '')[0].split(chr(10) * 2)[0].split('. ')[0].rstrip('.'))}" for p, c in commands]
    body = [_command(p, c) for p, c in commands]
    return (HEADER.replace("{codes}", _codes()) + _refusals() + _config() + _options_table("## Options before the command", root)
            + "\n".join(index) + "\n\n" + "\n".join(body))


def _options_table(title: str, command) -> str:
    rows = [f"| {', '.join(f'`{n}`' for n in o.opts)} | {_cell(o.help or '')} |" for o in command.params
            if not o.hidden]
    return "\n".join([title, "", "| option | help |", "|---|---|", *rows,
                      "| `-h`, `--help` | Show the help and exit. |", ""]) + "\n"


if __name__ == "__main__":
    print(render_reference(), end="")
