"""The `spark-deploy` command: a thin layer that parses, calls one function and prints."""

from __future__ import annotations

import typer

from . import bench_cmd, config_cmds, demo, deploy_cmds, pin_cmd, preflight_cmd, release_cmds
from . import maintenance_cmd
from . import boot_cmd
from . import accept_cmd
from . import watch_cmd
from . import sim as sim_cmds
from .common import set_debug

app = typer.Typer(
    name="spark-deploy",
    help="Deploy vLLM across DGX Spark machines with tensor parallelism, and keep the deployment honest.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)


@app.callback()
def _options(debug: bool = typer.Option(False, "--debug", help="Print the traceback behind an error (as "
                                                                 "SPARK_DEPLOY_DEBUG=1 does).")) -> None:
    set_debug(debug)  # never the environment: a test's in-process `--debug` would reach every later command


app.command()(config_cmds.validate)
app.command()(config_cmds.render)
app.command()(pin_cmd.pin)
app.command()(preflight_cmd.preflight)
app.command()(deploy_cmds.up)
app.command()(deploy_cmds.down)
app.command()(deploy_cmds.status)
app.command()(deploy_cmds.logs)
app.command(context_settings=accept_cmd.HELP)(accept_cmd.accept)
app.command(context_settings=watch_cmd.HELP)(watch_cmd.watch)
app.command()(release_cmds.history)
app.command()(release_cmds.rollback)
app.command()(release_cmds.lock)
app.command()(release_cmds.audit)
app.command()(release_cmds.prune)
app.command()(demo.demo)
app.add_typer(boot_cmd.app, name="boot", help="What comes back when the nodes boot: enable, disable, status.")
app.command()(bench_cmd.bench)
# Always mounted: without the `sim` extra its commands exit 2 with the install line (cli/extras.py).
app.add_typer(sim_cmds.app, name="sim", help="A simulated DGX Spark cluster (real sshd and dockerd per node).")
app.add_typer(maintenance_cmd.app, name="maintenance")


def run() -> None:
    app()
