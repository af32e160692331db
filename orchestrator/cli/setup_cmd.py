"""`setup`: from fresh nodes to a validated inventory (thin: parse, run orchestrator/setup, print)."""

from __future__ import annotations

import getpass
import os
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.markup import escape
from rich.table import Table

from .common import BadInput, Failed, JsonOpt, emit_json, err, exit_codes, out, FailedAsShown, only_node


class _Prompts:
    """Questions on the terminal (stderr, so `--json` keeps stdout to its one object)."""

    def __init__(self, interactive: bool):
        self.interactive = interactive

    def host_key(self, key) -> str:
        err.print(f"{escape(key.host)}: host key {key.key.get_name()} {key.fingerprint}", markup=False)
        return _ask(f"Trust {key.host}'s host key? (yes/no/[fingerprint]): ")

    def password(self, user: str, hosts: list[str]) -> str:
        return getpass.getpass(f"Password of {user} on {', '.join(hosts)} (asked once, never stored): ",
                               stream=sys.stderr)

    def confirm(self, question: str, detail: list[str]) -> bool:
        for line in detail:
            err.print(escape(line), highlight=False)
        return _ask(f"{question} [y/N] ").lower() in ("y", "yes")

    def say(self, text: str) -> None:
        err.print(escape(text))


def _ask(prompt: str) -> str:
    sys.stderr.write(prompt)
    sys.stderr.flush()
    line = sys.stdin.readline()
    if not line:
        raise Failed("no answer (end of input): nothing was written")
    return line.strip()


def _known_hosts(output: Path, given: Optional[Path]) -> str:
    """--known-hosts; else the one the existing inventory names; else ~/.ssh/known_hosts."""
    if given is not None:
        return str(given.expanduser().resolve())
    if output.exists():
        from ..config.load import load_inventory
        try:
            named = load_inventory(output)[0].ssh.known_hosts
        except Exception:  # noqa: BLE001 - a broken old inventory names nothing we can trust
            named = None
        if named:
            return named
    return str(Path("~/.ssh/known_hosts").expanduser())


def local_user() -> str:
    """The login ssh would use without `-l`: this machine's user name (never assumed to be root). Read when
    the command runs, not when the help is written, so neither the help nor docs/cli.md names whoever
    generated them."""
    try:
        return getpass.getuser()
    except (OSError, KeyError):  # no USER/LOGNAME and no passwd entry (a bare container)
        raise BadInput("this machine's user name is unknown (no USER, LOGNAME or passwd entry): give --user "
                       "NAME, the login on the nodes") from None


def _fingerprints(values: list[str]) -> dict[str, str]:
    out = {}
    for value in values:
        host, sep, fp = value.partition("=")
        if not sep or not fp.startswith("SHA256:"):
            raise BadInput(f"--fingerprint {value!r}: expected HOST=SHA256:... (`ssh-keygen -lf` on the node)")
        out[host] = fp
    return out


def setup(
    hosts: Annotated[list[str], typer.Argument(help="The nodes' management addresses (the first is the head).",
                                               show_default=False)],
    user: Annotated[Optional[str], typer.Option("--user", help="The login on the nodes (default: your user name "
                                                "here, as ssh does; a stock DGX OS has no root login).",
                                                show_default=False)] = None,
    output: Annotated[Path, typer.Option("--output", "-o", help="The inventory to write.")] = Path("inventory.yaml"),
    port: Annotated[int, typer.Option("--port", help="sshd's port on the nodes.")] = 22,
    key: Annotated[Optional[Path], typer.Option("--key", help="A private key to log in with (default: the "
                                                "agent and ~/.ssh's keys).")] = None,
    known_hosts: Annotated[Optional[Path], typer.Option("--known-hosts", help="Where host keys are written "
                                                        "(default: the inventory's, else ~/.ssh/known_hosts).")] = None,
    cluster: Annotated[str, typer.Option("--cluster", help="The cluster's name in the inventory.")] = "spark",
    fingerprint: Annotated[Optional[list[str]], typer.Option(
        "--fingerprint", help="HOST=SHA256:... to trust without asking (repeatable).")] = None,
    node_keys: Annotated[Optional[bool], typer.Option(
        "--node-keys/--no-node-keys", help="Set up node-to-node SSH over the fabric (default: ask).")] = None,
    yes: Annotated[bool, typer.Option("--yes", "-y", help="Do not ask: unknown host keys need --fingerprint, an "
                                                          "existing inventory is replaced.")] = False,
    as_json: JsonOpt = False,
) -> None:
    """Fetch and confirm host keys, log in (or install a key), discover every node read only, find the
    fabric by probing, and write an inventory that `validate` accepts, each value commented with its source.

    Example: spark-deploy setup 192.168.1.11 192.168.1.12 --user nvidia -o inventory.yaml
    """
    from ..setup import run as setup_run
    from ..setup.hostkeys import HostKeyRefused
    from ..setup.login import LoginFailed

    with exit_codes(as_json):
        if len(set(hosts)) != len(hosts):
            raise BadInput(f"a host is given twice: {' '.join(hosts)}")
        opts = setup_run.Options(
            hosts=list(hosts), user=user or local_user(), port=port, output=str(output), cluster=cluster,
            known_hosts=_known_hosts(output, known_hosts), fingerprints=_fingerprints(fingerprint or []),
            key=str(key.expanduser().resolve()) if key else None, node_keys=node_keys if node_keys is not None
            else (False if yes else None))
        try:
            outcome = setup_run.run(opts, _Prompts(not yes))
        except (HostKeyRefused, LoginFailed, setup_run.SetupFailed) as exc:
            raise Failed(str(exc)) from None
        if as_json:
            emit_json({"ok": not outcome.problems and (outcome.written or not outcome.diff),
                       "written": outcome.written, "inventory": str(output), "facts": outcome.decision.rows,
                       "problems": [vars(p) for p in outcome.problems],
                       "warnings": [vars(w) for w in outcome.decision.warnings], "diff": outcome.diff,
                       "known_hosts_added": outcome.known_hosts_added, "node_keys": outcome.node_keys,
                       "declined": outcome.declined})
        else:
            _print(outcome, output)
        if outcome.problems or (outcome.diff and not outcome.written):
            raise FailedAsShown("; ".join(str(p) for p in outcome.problems)
                                or f"{output} differs from what was found and was not written",
                                node=only_node(p.node for p in outcome.problems) if outcome.problems else None)


def _print(outcome, output: Path) -> None:
    rows = outcome.decision.rows
    nodes = list(dict.fromkeys(n for per in rows.values() for n in per))
    table = Table(title="setup: what each node shows")
    table.add_column("fact")
    for node in nodes:
        table.add_column(node, overflow="fold")
    for fact, per in rows.items():
        table.add_row(escape(fact), *(escape(per.get(n, "-")) for n in nodes))
    out.print(table)
    for line in outcome.known_hosts_added:
        out.print(f"known_hosts: added {escape(line)}")
    for line in outcome.node_keys:
        out.print(f"node keys: {escape(line)}")
    for p in outcome.problems:
        out.print(f"[bold red]{escape(p.node)}[/]: {escape(p.fact)}: {escape(p.seen)}\n  fix: {escape(p.fix)}")
    for w in outcome.decision.warnings:
        out.print(f"[yellow]warning[/]: {escape(w.node)}: {escape(w.fact)}: {escape(w.seen)}\n  fix: {escape(w.fix)}")
    if outcome.problems:
        out.print(f"[bold red]failed[/]: {len(outcome.problems)} problem(s) to fix first; {output} "
                  f"{'left as it was' if os.path.exists(output) else 'not written'}")
    elif outcome.written:
        if outcome.diff:
            out.print(escape(outcome.diff))
        out.print(f"[green]ok[/] wrote {escape(str(output))} (validated); next: "
                  f"spark-deploy preflight RECIPE -i {escape(str(output))}")
    else:
        out.print(escape(outcome.declined))
