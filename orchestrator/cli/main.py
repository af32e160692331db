"""The `spark-deploy` command: a thin layer that parses, calls one function and prints."""

from __future__ import annotations

import typer

from . import bench_cmd, config_cmds, demo, deploy_cmds, pin_cmd, preflight_cmd, release_cmds
from . import maintenance_cmd
from . import boot_cmd
from . import export_cmd
from . import setup_cmd
from . import model_cmd
from . import schema_cmd
from . import accept_cmd
from . import watch_cmd
from . import sim as sim_cmds
from .common import set_debug
from .conventions import CONTEXT_SETTINGS, ReadableGroup, version_callback

app = typer.Typer(
    name="spark-deploy",
    cls=ReadableGroup,
    help="Deploy vLLM across DGX Spark machines with tensor parallelism, and keep the deployment honest.\n\n"
         "Exit codes: 0 ok, 1 a check or deployment failed, 2 bad input. Every command takes -h and --json.",
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


app.command()(config_cmds.validate)
app.command()(config_cmds.render)
app.command()(pin_cmd.pin)
app.command()(preflight_cmd.preflight)
app.command()(deploy_cmds.up)
app.command()(deploy_cmds.down)
app.command()(deploy_cmds.status)
app.command()(deploy_cmds.logs)
app.command()(accept_cmd.accept)
app.command()(watch_cmd.watch)
app.command()(release_cmds.history)
app.command()(release_cmds.rollback)
app.command()(release_cmds.lock)
app.command()(release_cmds.audit)
app.command()(release_cmds.prune)
app.command()(demo.demo)
app.command()(schema_cmd.schema)
app.add_typer(boot_cmd.app, name="boot", help="What comes back when the nodes boot: enable, disable, status.")
app.command()(bench_cmd.bench)
app.command()(setup_cmd.setup)
# Always mounted: without the `sim` extra its commands exit 2 with the install line (cli/extras.py).
app.add_typer(sim_cmds.app, name="sim", help="A simulated DGX Spark cluster (real sshd and dockerd per node).")
app.add_typer(maintenance_cmd.app, name="maintenance")
app.add_typer(export_cmd.app, name="export")
app.add_typer(model_cmd.app, name="model", help="The model's weights on every node: pull (download once, copy blobs).")


def run() -> None:
    app()
