"""After a restart: the release's boot units watch their ranks again.

`boot enable` leaves each node's unit attached to its running container (deploy/boot_supervise.py). A restart
stops that container, so the unit's `docker start --attach` ends and the unit goes inactive: nothing would
start a rank again that exits, until the next boot. Here every enabled unit of ours that names the container
just restarted on its node is started again (it attaches). Where that cannot be done (no root, systemctl
refused) it is said, with the command that does it; the restart itself stands (the group serves).

Before the stop, those units let go of their containers (boot_supervise.let_go: their process SIGKILLed, so
systemd runs neither ExecStop nor Restart=). Left attached, a survivor's clean exit under `docker stop` runs
the unit's ExecStop — another `docker stop` of the same container — which can land after the restart started
it again, and a rank exiting non-zero is started by the unit while the restart starts it too.
"""

from __future__ import annotations

from ..facts.core import gather_node
from ..releases.keys import cluster_key
from ..render.unit import unit_name
from ..runner.events import Events
from ..transport.group import Cluster
from ..transport.node import NodeConnection
from . import boot_supervise, privilege
from .restore import Kept


class UnitsHeld(Exception):
    """A boot unit watches a rank to be restarted and cannot be let go of: the restart does not begin."""


def units_of(facts: dict, cluster: str, recipe: str, container: str) -> str | None:
    """Pure: the name of our enabled unit for (cluster, recipe) on a node when it starts `container`."""
    obs = facts.get("boot_units")
    if obs is None or not obs.ok or not obs.value.systemd:
        return None
    name = unit_name(cluster, recipe)
    info = next((u for u in obs.value.units if u.id == name), None)
    return name if info is not None and info.key("Container") == container else None


def attached(cluster: Cluster, kept: dict[str, Kept], recipe: str, events: Events) -> dict[str, str]:
    """Per node, the enabled unit of ours that watches the container about to be restarted (rank order)."""
    key = cluster_key(cluster.inventory)
    conns = [cluster[node] for node in kept]

    def named(conn: NodeConnection) -> str | None:
        facts = gather_node(conn, ["boot_units"], None, timeout=60)
        return units_of(facts, key, recipe, kept[conn.name].name)

    try:
        seen = cluster.each(named, conns)
    except Exception as exc:  # noqa: BLE001 - the group serves; the units are a second concern, said
        events.warn(f"whether a boot unit watched the restarted ranks could not be read ({exc}): "
                    f"`spark-deploy boot status` shows it")
        return {}
    return {n: seen[n] for n in kept if seen.get(n)}


def let_go(cluster: Cluster, found: dict[str, str]) -> None:
    """Before the stop: every found unit lets go of its container (it keeps running until the stop)."""
    if not found:
        return
    roots = privilege.find(cluster, [cluster[n] for n in found])
    for node, name in found.items():  # every node able first: never some units let go and the rest not
        root = roots.get(node)
        if root is None or root.prefix is None:
            raise UnitsHeld(f"boot unit {name} on {node} watches a rank to be restarted and "
                            f"{root.user if root else 'the login'} is not root and `sudo -n` fails: it cannot let "
                            "go of it, and its ExecStop would stop the restarted rank (`spark-deploy boot disable` "
                            "or passwordless sudo first); nothing was stopped")
    for node, name in found.items():
        boot_supervise.let_go(cluster[node], name, roots[node])


def watch_again(cluster: Cluster, found: dict[str, str], recipe: str, events: Events) -> list[str]:
    """Start again the units that let go before the restart; the nodes where one was (said in the audit
    line). Never raises for a unit: a warning names the node and the fix."""
    if not found:
        return []
    roots = privilege.find(cluster, [cluster[n] for n in found])
    watching = []
    for node, name in found.items():
        root = roots.get(node)
        try:
            if root is None or root.prefix is None:
                raise RuntimeError(f"{root.user if root else 'the login'} is not root and `sudo -n` fails")
            boot_supervise.watch_again(cluster[node], name, root)
            watching.append(node)
        except Exception as exc:  # noqa: BLE001 - said with its fix, the restart stands
            events.warn(f"boot unit {name} no longer watches its rank ({exc}): `sudo systemctl start {name}` on "
                        f"the node, or `spark-deploy boot enable` of {recipe}'s recipe, attaches it again", node)
    if watching:
        events.note(f"boot units watch their ranks again on {', '.join(watching)}")
    return watching
