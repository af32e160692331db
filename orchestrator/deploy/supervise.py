"""`supervise enable|disable|status`: the group supervisor of the serving release, on its head node.

Enable renders (render/supervisor.py) the program, its config and its systemd unit for the release that serves
now and installs them on the head: the program and config in the head's state dir (the login user's), the
unit in /etc/systemd/system (root: sudo -n), then `systemctl enable` and `restart`. One Operation (the lock,
one state read, one audit line); a failure removes what was installed. Disable stops and removes it. The
supervisor reaches the peers by node-to-node SSH (`setup --node-keys`), which enable proves from the head.
"""

from __future__ import annotations

import json
import posixpath
from dataclasses import dataclass
from functools import partial

from ..config.inventory import Inventory
from ..facts import supervisor as facts_supervisor
from ..operation import AuditAction, Observation, Operation, Outcome, Reach
from ..releases.audit import audit_path
from ..releases.keys import cluster_key
from ..releases.lock import lock_path
from ..releases.record import Release
from ..releases.serving import containers_of
from ..releases.store import record_path
from ..render.plan import build_plan
from ..render.supervisor import Bounds, SupervisorFiles, render_files, supervisor_unit_name
from ..runner.events import Events
from ..transport.group import Cluster, Connector
from ..transport.node import NodeConnection
from . import privilege
from .restart import RestartRefused, whole
from .restart_units import attached
from .restore import recorded_deployment


class SuperviseRefused(Exception):
    """Nothing to supervise, or the head cannot run it (no root, no python3, a peer unreachable by SSH)."""


@dataclass
class EnableResult:
    release: Release
    files: SupervisorFiles


def base_dir(inventory: Inventory) -> str:
    return posixpath.join(inventory.node(inventory.head).state_dir, "supervise", cluster_key(inventory))


def files_for(op: Operation, inventory_path: str, bounds: Bounds) -> tuple[Release, SupervisorFiles, dict]:
    """From the operation's one reading: the serving release and every file of its supervisor (pure after
    the read)."""
    state, inv = op.state, op.inventory
    if not state.serving_known:
        raise SuperviseRefused("cannot tell what serves: " + "; ".join(state.problems()))
    release = state.serving
    if release is None:
        raise SuperviseRefused(f"no release serves on {inv.cluster}: nothing to supervise "
                               "(`spark-deploy up RECIPE` deploys one)")
    dep = recorded_deployment(release, inv, inventory_path)
    try:
        kept = whole(release, containers_of(release, state.containers), dep)
    except RestartRefused as exc:
        raise SuperviseRefused(str(exc)) from exc
    head = inv.head
    files = render_files(build_plan(dep), inv, release.id, base=base_dir(inv),
                         record=record_path(inv, head, release.id), lock=lock_path(inv),
                         audit={n.name: audit_path(inv, n.name) for n in inv.nodes}, bounds=bounds,
                         containers={node: k.name for node, k in kept.items()})
    return release, files, kept


def refuse_boot_units(op: Operation, release: Release, kept: dict) -> None:
    """Boot units of this release (`boot enable`) restart a single rank and run `docker stop` when one ends
    cleanly: beside a group supervisor they would fight its restarts (a unit's stop landing on a rank the
    supervisor had just started). One watcher per release: the supervisor also brings the group back after
    the head reboots (its unit starts at boot)."""
    found = attached(op.cluster, kept, release.recipe, op.events)
    if found:
        raise SuperviseRefused(f"boot units of release {release.id} are enabled on {', '.join(found)} "
                               f"({', '.join(sorted(set(found.values())))}): they restart single ranks and would "
                               "fight the group restarts; `spark-deploy boot disable` first (the supervisor "
                               "brings the group back after a reboot too)")


PROVE_PEER = 'ssh -o BatchMode=yes -o ConnectTimeout=5 -p "$2" "$1" true'


def _prove(conn: NodeConnection, files: SupervisorFiles, inv: Inventory) -> None:
    """python3 on the head, and every peer answering the head's SSH (what the program needs)."""
    if not conn.run(["python3", "-c", "import json, urllib.request"], timeout=30).ok:
        raise SuperviseRefused(f"{conn.name}: no python3 to run the supervisor")
    cfg = json.loads(files.config_text)
    for name, node in cfg["nodes"].items():
        if name == files.node:
            continue
        proved = conn.run_script(PROVE_PEER, f"{node['user']}@{node['fabric_ip']}", str(node["ssh_port"]), timeout=30)
        if not proved.ok:
            raise SuperviseRefused(f"{conn.name} cannot reach {name} by SSH at {node['fabric_ip']} "
                                   f"({(proved.stderr or proved.stdout).strip()[:300]}): the supervisor needs "
                                   "node-to-node SSH (`spark-deploy setup --node-keys`)")


def install(conn: NodeConnection, files: SupervisorFiles, root: privilege.Root, scratch: str) -> None:
    """The files, the unit, enabled and (re)started: a supervisor of an earlier release is replaced."""
    conn.run(["mkdir", "-p", "--", posixpath.dirname(files.script_path)], timeout=30, check=True)
    conn.run(["rm", "-f", "--", files.state_path], timeout=30, check=True)  # a new release: a new record
    conn.put_file(files.script_path, files.script_text)
    conn.put_file(files.rules_path, files.rules_text)
    conn.put_file(files.config_path, files.config_text)
    root.put_file(conn, files.unit_path, files.unit_text, scratch)
    conn.run(root.argv(["systemctl", "daemon-reload"]), timeout=60, check=True)
    conn.run(root.argv(["systemctl", "enable", files.unit_name]), timeout=60, check=True)
    conn.run(root.argv(["systemctl", "restart", files.unit_name]), timeout=60, check=True)


def remove(conn: NodeConnection, unit: str, base: str, root: privilege.Root) -> None:
    conn.run(root.argv(["systemctl", "disable", "--now", unit]), timeout=90)
    conn.run(root.argv(["rm", "-f", "--", f"/etc/systemd/system/{unit}"]), timeout=30, check=True)
    conn.run(root.argv(["systemctl", "daemon-reload"]), timeout=60, check=True)
    conn.run(root.argv(["systemctl", "reset-failed", unit]), timeout=30)
    conn.run(["rm", "-rf", "--", base], timeout=30, check=True)


def _root(op: Operation, doing: str) -> privilege.Root:
    head = op.cluster.head
    roots = privilege.find(op.cluster, [head])
    refused = privilege.refusal(roots, doing)
    if refused:
        raise SuperviseRefused(refused)
    return roots[head.name]


def enable(inventory: Inventory, inventory_path: str, events: Events, bounds: Bounds | None = None, *,
           connector: Connector | None = None) -> EnableResult:
    """One operation: the serving release's supervisor rendered, proven runnable, installed and started on the
    head; refused (one `refused` line, nothing installed) when nothing serves or the head cannot run it."""
    with Operation(inventory, events, AuditAction.SUPERVISE_ENABLE, reach=Reach.ALL, ttl=600,
                   cluster_factory=partial(Cluster, connector=connector)) as op:
        try:
            release, files, kept = files_for(op, inventory_path, bounds or Bounds())
            refuse_boot_units(op, release, kept)
            head = op.cluster.head
            _prove(head, files, op.inventory)
            root = _root(op, "supervise enable")
        except SuperviseRefused as exc:
            op.done(Outcome.REFUSED, str(exc))
            raise
        try:
            install(head, files, root, posixpath.dirname(files.script_path))
        except Exception:
            remove(head, files.unit_name, posixpath.dirname(files.script_path), root)  # the undo: nothing left
            raise
        events.note(f"supervisor {files.unit_name} runs on {head.name}: it watches release {release.id}")
        op.done(Outcome.OK, f"release {release.id}: supervisor {files.unit_name} on {head.name}", release=release.id)
        return EnableResult(release, files)


def disable(inventory: Inventory, events: Events, *, connector: Connector | None = None) -> str:
    with Operation(inventory, events, AuditAction.SUPERVISE_DISABLE, reach=Reach.HEAD, ttl=300,
                   cluster_factory=partial(Cluster, connector=connector)) as op:
        try:
            root = _root(op, "supervise disable")
        except SuperviseRefused as exc:
            op.done(Outcome.REFUSED, str(exc))
            raise
        unit = supervisor_unit_name(op.inventory.cluster)
        remove(op.cluster.head, unit, base_dir(op.inventory), root)
        op.done(Outcome.OK, f"supervisor {unit} removed from {op.cluster.head.name}")
        return unit


def read_state(conn: NodeConnection, inventory: Inventory) -> facts_supervisor.SupervisorState:
    said = conn.run_script(facts_supervisor.SCRIPT, supervisor_unit_name(inventory.cluster),
                           posixpath.join(base_dir(inventory), "state.json"), timeout=30, check=True)
    return facts_supervisor.parse(said.stdout)


def status(inventory: Inventory) -> facts_supervisor.SupervisorState:
    with Observation(inventory, what="supervise status") as seen:
        return read_state(seen.cluster.head, inventory)
