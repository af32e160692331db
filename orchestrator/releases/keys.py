"""What a cluster's state is keyed by: the identity its head holds (releases/identity.py), once the head has
said it in this process; before that, the inventory's own `cluster_id`, else its `cluster:` name.

Kept apart from identity.py (which reads and writes the identity with the lock's scripts) so the lock, the
store and the audit log can key their paths by it without a circle."""

from __future__ import annotations

from ..config.inventory import Inventory

# The id each head answered with in this process, by the head (address, SSH port, state_dir) and what the
# inventory calls the cluster; refreshed at every open.
_RESOLVED: dict[tuple, str] = {}


def head_key(inventory: Inventory) -> tuple:
    head = inventory.node(inventory.head)
    port = head.ssh.port if head.ssh and head.ssh.port else inventory.ssh.port
    return head.address, port, head.state_dir, inventory.cluster, inventory.cluster_id


def cluster_key(inventory: Inventory) -> str:
    """The id the records, the lock, the audit log and the container labels of this cluster carry."""
    return _RESOLVED.get(head_key(inventory)) or inventory.key


def remember(inventory: Inventory, key: str) -> None:
    _RESOLVED[head_key(inventory)] = key
