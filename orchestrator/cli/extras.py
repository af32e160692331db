"""Optional extras: `sim ...` and `demo` need the `sim` extra (docker-py, cryptography); say so plainly.

Without it every other command works, and these two exit 2 with the install line instead of a traceback.
"""

from __future__ import annotations

import importlib

import typer
from rich.markup import escape

from .common import EXIT_BAD_INPUT, err

SIM_MODULES = ("docker", "cryptography")
SIM_INSTALL_HINT = ("install spark-deploy[sim]: from a checkout, pipx install --force '.[sim]' "
                    "(or pip install '.[sim]' in its venv)")


def missing_sim_modules() -> list[str]:
    """The modules of the `sim` extra that cannot be imported here."""
    missing = []
    for name in SIM_MODULES:
        try:
            importlib.import_module(name)
        except ImportError:
            missing.append(name)
    return missing


def require_sim(command: str) -> None:
    """Exit 2 naming what is missing when the simulator's dependencies are not installed."""
    missing = missing_sim_modules()
    if missing:
        err.print(f"[bold red]error[/]: `spark-deploy {command}` needs the simulator's dependencies "
                  f"({', '.join(missing)} not installed): {escape(SIM_INSTALL_HINT)}")
        raise typer.Exit(EXIT_BAD_INPUT)
