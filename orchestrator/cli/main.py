"""The `spark-deploy` command: a thin layer that parses, calls one function and prints."""

from __future__ import annotations

import typer

from ..verbosity import Verbosity, set_level
from .common import set_debug
from .conventions import CONTEXT_SETTINGS, version_callback
from .lazy import LazyCommand as Lazy, lazy_group

# Every command, in the order `--help` lists them: its module is imported only when it is used (cli/lazy.py).
COMMANDS = lazy_group([
    Lazy("validate", "config_cmds:validate"),
    Lazy("render", "config_cmds:render"),
    Lazy("pin", "pin_cmd:pin"),
    Lazy("recipe", "recipe_cmd:app", "Recipes from other launchers: import (sparkrun, eugr/spark-vllm-docker)."),
    Lazy("preflight", "preflight_cmd:preflight"),
    Lazy("fit", "fit_cmd:fit"),
    Lazy("up", "deploy_cmds:up"),
    Lazy("upgrade", "upgrade_cmd:upgrade"),
    Lazy("down", "deploy_cmds:down"),
    Lazy("status", "deploy_cmds:status"),
    Lazy("logs", "deploy_cmds:logs"),
    Lazy("accept", "accept_cmd:accept"),
    Lazy("watch", "watch_cmd:watch"),
    Lazy("history", "release_cmds:history"),
    Lazy("rollback", "release_cmds:rollback"),
    Lazy("restart", "restart_cmd:restart"),
    Lazy("lock", "release_cmds:lock"),
    Lazy("audit", "release_cmds:audit"),
    Lazy("prune", "release_cmds:prune"),
    Lazy("demo", "demo:demo"),
    Lazy("schema", "schema_cmd:schema"),
    Lazy("bench", "bench_cmd:bench"),
    Lazy("tune", "tune_cmd:tune"),
    Lazy("setup", "setup_cmd:setup"),
    Lazy("boot", "boot_cmd:app", "What comes back when the nodes boot: enable, disable, status."),
    Lazy("supervise", "supervise_cmd:app", "The group supervisor on the head: enable, disable, status."),
    # Always mounted: without the `sim` extra its commands exit 2 with the install line (cli/extras.py).
    Lazy("sim", "sim:app", "A simulated DGX Spark cluster (real sshd and dockerd per node)."),
    Lazy("maintenance", "maintenance_cmd:app"),
    Lazy("export", "export_cmd:app"),
    Lazy("overlay", "overlay_cmd:app", "Files mounted over the image: their hashes in the pinned image."),
    Lazy("model", "model_cmd:app", "The model's weights on every node: pull (download once, copy blobs)."),
    Lazy("fabric", "fabric_cmd:app", "The fabric measured: bandwidth per link both ways, latency, a baseline."),
])

app = typer.Typer(
    name="spark-deploy",
    cls=COMMANDS,
    help="Deploy vLLM across DGX Spark machines with tensor parallelism, and keep the deployment honest.\n\n"
         "Exit codes: 0 ok, 1 a check or deployment failed, 2 bad input, 130 Ctrl-C, 143 SIGTERM. Every command "
         "takes -h and --json.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
    context_settings=CONTEXT_SETTINGS,
)


@app.callback()
def _options(
    debug: bool = typer.Option(False, "--debug", help="Print the traceback behind an error (as "
                                                      "SPARK_DEPLOY_DEBUG=1 does)."),
    _version: bool = typer.Option(False, "--version", is_eager=True, callback=version_callback,
                                  help="Print the version and exit."),
) -> None:
    set_debug(debug)  # never the environment: a test's in-process `--debug` would reach every later command
    set_level(Verbosity.NORMAL)  # the command's own -q/-v (cli/conventions.py) set it again


def run() -> None:
    app()
