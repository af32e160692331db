"""Root on a node, as the login user can get it: logged in as root, or sudo without a password (`sudo -n`).

A stock DGX OS account is in the docker group but its sudo asks for a password, which a batch SSH session
cannot give. Commands that need root (systemd units) ask first, on every node, and refuse before changing
anything, saying what would do.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..transport.group import Cluster
from ..transport.node import NodeConnection

_PROBE = r'''if [ "$(id -u)" = 0 ]; then echo "root $(id -un)"
elif command -v sudo >/dev/null 2>&1 && sudo -n true 2>/dev/null; then echo "sudo $(id -un)"
else echo "none $(id -un) $( (sudo -n true) 2>&1 | head -n 1)"; fi'''


@dataclass(frozen=True)
class Root:
    """How one node runs a command as root: `prefix` before its argv (empty when logged in as root)."""
    node: str
    user: str
    prefix: tuple[str, ...] | None  # None: no way to root
    why: str = ""

    def argv(self, argv: list[str]) -> list[str]:
        assert self.prefix is not None, "asked for root where there is none"
        return [*self.prefix, *argv]

    def put_file(self, conn: NodeConnection, path: str, text: str, scratch_dir: str) -> None:
        """Write `path` (mode 0644) as root: directly when root, else a file of ours moved with sudo install."""
        if not self.prefix:
            conn.put_file(path, text)
            return
        scratch = f"{scratch_dir}/.{path.rsplit('/', 1)[-1]}.new"
        conn.put_file(scratch, text)
        try:
            conn.run(self.argv(["install", "-m", "0644", "--", scratch, path]), timeout=60, check=True)
        finally:
            conn.run(["rm", "-f", "--", scratch], timeout=30)


def parse(node: str, stdout: str) -> Root:
    kind, _, rest = stdout.strip().partition(" ")
    user, _, why = rest.partition(" ")
    if kind == "root":
        return Root(node, user, ())
    if kind == "sudo":
        return Root(node, user, ("sudo", "-n"))
    return Root(node, user or "?", None, why.strip() or "sudo is not installed")


def find(cluster: Cluster, conns: list[NodeConnection] | None = None) -> dict[str, Root]:
    """Every node's way to root, read at once (read-only)."""
    out = cluster.each(lambda c: parse(c.name, c.run_script(_PROBE, timeout=20, check=True).stdout), conns)
    return dict(out)


def refusal(roots: dict[str, Root], doing: str) -> str | None:
    """None when every node has root; else one message naming each node without it and what would do."""
    lacking = [r for r in roots.values() if r.prefix is None]
    if not lacking:
        return None
    said = "; ".join(f"{r.node}: {r.user} is not root and `sudo -n` fails ({r.why})" for r in lacking)
    return (f"{doing} needs root on the node; {said}. Nothing was changed. Log in as root for this "
            "(ssh.user or the node's ssh.user in the inventory), or give the login user passwordless sudo "
            "(a sudoers line such as `USER ALL=(root) NOPASSWD: /usr/bin/systemctl, /usr/bin/install, /usr/bin/rm`)")
