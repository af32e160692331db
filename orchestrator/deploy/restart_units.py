"""After a restart: the release's boot units watch their ranks again.

`boot enable` leaves each node's unit attached to its running container (deploy/boot_supervise.py). A restart
stops that container, so the unit's `docker start --attach` ends and the unit goes inactive: nothing would
start a rank again that exits, until the next boot. Here every enabled unit of ours that names the container
just restarted on its node is started again (it attaches). Where that cannot be done (no root, systemctl
refused) it is said, with the command that does it; the restart itself stands (the group serves).
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


def units_of(facts: dict, cluster: str, recipe: str, container: str) -> str | None:
    """Pure: the name of our enabled unit for (cluster, recipe) on a node when it starts `container`."""
    obs = facts.get("boot_units")
    if obs is None or not obs.ok or not obs.value.systemd:
        return None
    name = unit_name(cluster, recipe)
    info = next((u for u in obs.value.units if u.id == name), None)
    return name if info is not None and info.key("Container") == container else None


def watch_again(cluster: Cluster, kept: dict[str, Kept], recipe: str, events: Events) -> list[str]:
    """Start again the enabled units of ours that watched the restarted containers; the nodes where one was
    (said in the audit line). Never raises for a unit: a warning names the node and the fix."""
    key = cluster_key(cluster.inventory)
    conns = [cluster[node] for node in kept]

    def named(conn: NodeConnection) -> str | None:
        facts = gather_node(conn, ["boot_units"], None, timeout=60)
        return units_of(facts, key, recipe, kept[conn.name].name)

    try:
        seen = cluster.each(named, conns)
        found = {n: seen[n] for n in kept if seen.get(n)}  # in rank order, as they are said
    except Exception as exc:  # noqa: BLE001 - the group serves; the units are a second concern, said
        events.warn(f"whether a boot unit watched the restarted ranks could not be read ({exc}): "
                    f"`spark-deploy boot status` shows it")
        return []
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
