"""A deployment bound to an in-memory world: the bundled sim recipe on the unit inventory of fakes.py, each
node holding the stand-in image, and `up` / `rollback` / `down` / `prune` with the memory seams passed.

Preflight's registry checks are skipped here (`--skip-check` for every one): they gather their facts with
one composed script per node, unit-tested on captured outputs in test_preflight_*; these tests are about
what the commands change, undo and restore.
"""

from __future__ import annotations

import secrets
from pathlib import Path

from orchestrator import preflight
from orchestrator.config.load import Deployment
from orchestrator.deploy import down as down_mod
from orchestrator.deploy import prune as prune_mod
from orchestrator.deploy.context import UpOptions
from orchestrator.deploy.rollback import rollback
from orchestrator.deploy.up import up
from orchestrator.runner.events import Events

from fakes import deployment

from .endpoint import endpoint_at
from .model import Container, World, sim_image
from .node import connector

PREFLIGHT = [s.name for s in preflight.select(up_subset=True) if s.name not in ("ports", "image")]


def quick(**changes) -> UpOptions:
    """Bounds short enough for a unit test, long enough for a loaded machine (the model answers at once)."""
    opts = dict(skip_checks=list(PREFLIGHT), listen_timeout=5, join_timeout=5, ready_timeout=5, expect_timeout=5,
                poll=0.02, heartbeat=60)
    opts.update(changes)
    return UpOptions(**opts)


class MemCluster:
    """One test's cluster: the world, the files that make a deployment, and the commands on it."""

    def __init__(self, directory: Path):
        self.directory = directory
        self.cluster = f"mem-{secrets.token_hex(4)}"  # rollback's kept recipe copy is named by cluster
        known = directory / "known_hosts"
        known.write_text("")
        self.known_hosts = str(known)
        self.world = World()
        self.dep = self.deployment()
        for node in self.dep.inventory.ranked:
            self.world.add(node.name, node.address, node.fabric_ip, (sim_image(),))
        self.seen: list = []  # every event, for asserts
        self.events = Events(self)

    def handle(self, event) -> None:
        self.seen.append(event)

    def said(self) -> str:
        return "\n".join(f"{e.kind} {e.node or ''} {e.message}" for e in self.seen)

    def deployment(self, recipe=None) -> Deployment:
        def inventory(data: dict) -> None:
            data["cluster"] = self.cluster
            data["ssh"]["key"] = None
            data["ssh"]["known_hosts"] = self.known_hosts
            for node in data["nodes"]:
                node["state_dir"] = f"/var/lib/spark-deploy-{node['name']}"
        return deployment(self.directory, recipe, inventory)

    @property
    def inventory(self):
        return self.dep.inventory

    def node(self, name: str):
        return self.world.nodes[name]

    # ---- the commands, with the seams ---------------------------------------------------------
    def up(self, dep: Deployment | None = None, **opts):
        return up(dep or self.dep, self.events, quick(**opts), connector=connector(self.world),
                  endpoint_at=endpoint_at(self.world))

    def rollback(self, release: int | None = None, **kwargs):
        restore = kwargs.pop("restore", True)
        made = kwargs.pop("connector", None) or connector(self.world)
        return rollback(self.inventory, str(self.dep.inventory_path), release, self.events,
                        options=quick(restore=restore), connector=made, endpoint_at=endpoint_at(self.world), **kwargs)

    def seams(self, **opts):
        """bench --compare's way of deploying, in memory."""
        from orchestrator.bench.compare import Seams
        return Seams(connector(self.world), endpoint_at(self.world), quick(**opts))

    def down(self, recipe: str | None = None):
        return down_mod.down(self.inventory, recipe, self.events, connector=connector(self.world))

    def prune(self, keep: int):
        return prune_mod.prune(self.inventory, keep, self.events, connector=connector(self.world))

    # ---- what the world shows -----------------------------------------------------------------
    def running(self) -> dict[str, list[Container]]:
        return {n.name: [c for c in n.containers.values() if c.running] for n in self.world.nodes.values()}

    def serving_plan(self) -> str | None:
        """The plan hash every node runs (one container each), or None."""
        hashes = {n: {c.ours.plan_hash for c in cs} for n, cs in self.running().items()}
        if all(len(h) == 1 for h in hashes.values()) and len({h for hs in hashes.values() for h in hs}) == 1:
            return next(iter(next(iter(hashes.values()))))
        return None

    def files(self, node: str, part: str) -> dict[str, str]:
        return {p: t for p, t in self.node(node).files.items() if f"/{part}/" in p}
