"""The group supervisor's files, rendered from a release's Plan: its config (JSON) and its systemd unit.

Pure: no node is touched here (deploy/supervise.py installs them). The program itself is supervisor_node.py,
copied verbatim (stdlib only: the nodes have python3, not spark-deploy); everything release-specific (container
names, ports, peers, paths, bounds) is in the config, so the program is the same file on every cluster.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from importlib import resources

from ..config.inventory import Inventory
from .plan import Plan
from .unit import UNIT_DIR, UNIT_PREFIX, command_line, escape_name, setting_value


PYTHON = "/usr/bin/python3"  # DGX OS's (Ubuntu's) python3; the sim node image's too


@dataclass(frozen=True)
class Bounds:
    """How the supervisor watches and how far it goes (docs/recovery.md)."""

    interval: float = 5.0  # seconds between looks at every rank's container
    probe_every: int = 6  # a completion probe every K looks (0: none)
    probe_timeout: float = 30.0
    attempts: int = 3  # restarts allowed per window; past it, the release is stopped as crash-looped
    window: float = 1800.0
    backoff: float = 5.0  # seconds after a failed attempt, doubling
    backoff_cap: float = 60.0
    lock_poll: float = 5.0  # how often a held deploy lock is looked at again
    lock_ttl: float = 300.0  # the supervisor's lock expires this long after its last refresh (a killed one's)
    listen_timeout: float = 300.0
    ready_timeout: float = 1800.0
    stop_seconds: int = 30
    poll: float = 0.5  # how often a wait looks for its event


@dataclass(frozen=True)
class SupervisorFiles:
    node: str  # the head, where it runs
    unit_name: str
    unit_text: str
    script_path: str
    script_text: str
    rules_path: str  # beside the script: its pure decisions, imported by it
    rules_text: str
    config_path: str
    config_text: str
    state_path: str

    @property
    def unit_path(self) -> str:
        return f"{UNIT_DIR}/{self.unit_name}"


def supervisor_unit_name(cluster: str) -> str:
    return f"{UNIT_PREFIX}supervise-{escape_name(cluster)}.service"


def script_text(name: str = "supervisor_node.py") -> str:
    return resources.files("orchestrator.render").joinpath(name).read_text()


def render_config(plan: Plan, inventory: Inventory, release: int, *, record: str, lock: str, audit: dict[str, str],
                  state_file: str, bounds: Bounds, containers: dict[str, str] | None = None) -> dict:
    """Pure: what the program reads. `record`, `lock`, `state_file`: paths on the head; `audit`: per node;
    `containers`: per node, the name of the release's container when it is not the plan's (a redeploy's)."""
    names = containers or {}
    head = plan.head
    nodes = {}
    for launch in plan.ranks:
        node = launch.node
        ssh = node.ssh
        nodes[node.name] = {"fabric_ip": str(node.fabric_ip),
                            "ssh_port": (ssh.port if ssh and ssh.port else None) or inventory.ssh.port,
                            "user": (ssh.user if ssh and ssh.user else None) or inventory.ssh.user,
                            "audit": audit[node.name]}
    limits = {k: getattr(bounds, k) for k in Bounds.__dataclass_fields__}
    return {
        "cluster": plan.cluster, "recipe": plan.recipe, "release": release, "plan_hash": plan.plan_hash,
        "head": head.node.name, "head_host": head.node.name, "user": nodes[head.node.name]["user"],
        "nodes": nodes,
        "ranks": [{"rank": r.rank, "node": r.node.name, "container": names.get(r.node.name, r.container)}
                  for r in plan.ranks],
        "record": record, "lock": lock, "state_file": state_file,
        "served_model": head.labels.served_model, "api_host": "127.0.0.1", "serve_port": head.spec.serve_port,
        "master_port": head.spec.master_port,
        **limits,
    }


def render_unit(cluster: str, recipe: str, release: int, user: str, script: str, config: str) -> str:
    return "\n".join([
        "# Written by `spark-deploy supervise enable`; `spark-deploy supervise disable` removes it.",
        f"# Restarts release {release} of {recipe} as a whole group when a rank exits or it stops generating.",
        "[Unit]",
        "Description=" + setting_value(f"spark-deploy group supervisor: {recipe}, release {release}"),
        "After=docker.service network-online.target",
        "Wants=network-online.target",
        "",
        "[Service]",
        "Type=simple",
        f"User={user}",
        "ExecStart=" + command_line([PYTHON, script, config]),
        "Restart=on-failure",  # a crash loop it stopped exits 0: it stays stopped, as recorded
        "RestartSec=10",
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ])


def render_files(plan: Plan, inventory: Inventory, release: int, *, base: str, record: str, lock: str,
                 audit: dict[str, str], bounds: Bounds, containers: dict[str, str] | None = None) -> SupervisorFiles:
    """Pure: every file of the supervisor for the head; `base`: its directory in the head's state dir."""
    name = supervisor_unit_name(plan.cluster)
    script, config, state = f"{base}/supervisor.py", f"{base}/config.json", f"{base}/state.json"
    rules = f"{base}/supervisor_rules.py"
    cfg = render_config(plan, inventory, release, record=record, lock=lock, audit=audit, state_file=state,
                        bounds=bounds, containers=containers)
    return SupervisorFiles(plan.head.node.name, name,
                           render_unit(plan.cluster, plan.recipe, release, cfg["user"], script, config),
                           script, script_text(), rules, script_text("supervisor_rules.py"), config, json.dumps(cfg, indent=1, sort_keys=True) + "\n", state)
