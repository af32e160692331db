"""Node-to-node access for image and model copies (opt-in): each node's key authorised on the others,
and the others' host keys known under their fabric addresses; then proven with `ssh -o BatchMode=yes`.
Idempotent: what is there already is left as it is, and a different host key already known for an
address is a failure, never overwritten.
"""

from __future__ import annotations

from dataclasses import dataclass

from ..transport.node import NodeConnection
from .login import INSTALL_SH

# The login's key (made if absent: ssh-keygen, no passphrase) and the node's ed25519 host key.
OWN_KEYS_SH = r'''k=$HOME/.ssh/id_ed25519
if [ ! -f "$k" ]; then
  command -v ssh-keygen >/dev/null || { echo "no ssh-keygen to make $k" >&2; exit 3; }
  umask 077; mkdir -p -- "$HOME/.ssh"; ssh-keygen -q -t ed25519 -N '' -f "$k" -C "spark-deploy $(hostname -s)"
fi
cat -- "$k.pub"
cut -d' ' -f1,2 /etc/ssh/ssh_host_ed25519_key.pub'''

# "$1" address, "$2" key type, "$3" base64: known already, differs (exit 3), or appended.
KNOWN_SH = r'''f=$HOME/.ssh/known_hosts
umask 077; mkdir -p -- "$HOME/.ssh"; touch -- "$f"
has() { awk -v h="$1" -v k="$2" '{n = split($1, a, ","); for (i = 1; i <= n; i++) if (a[i] == h && (k == "" || $3 == k)) f = 1} END {exit !f}' "$f"; }
if has "$1" "$3"; then echo known
elif has "$1" ""; then echo "differs: $f holds another key for $1" >&2; exit 3
else printf '%s %s %s\n' "$1" "$2" "$3" >> "$f"; echo added; fi'''

PROVE_SH = r'''ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=5 -p "$2" "$1" true'''


@dataclass(frozen=True)
class Plan:
    node: str
    fabric_ip: str

    def steps(self, others: list["Plan"]) -> list[str]:
        return [f"{self.node}: authorise its ~/.ssh/id_ed25519.pub on {', '.join(o.node for o in others)}; "
                f"know their host keys as {', '.join(o.fabric_ip for o in others)}"]


def plan_text(plans: list[Plan]) -> list[str]:
    return [line for p in plans for line in p.steps([o for o in plans if o is not p])]


def apply(conns: dict[str, NodeConnection], plans: list[Plan], port: int) -> list[str]:
    """Do it, node by node; returns what changed (`added`), raises on the first failure with the node."""
    keys: dict[str, tuple[str, str]] = {}
    for p in plans:
        out = conns[p.node].run_script(OWN_KEYS_SH, timeout=60, check=True).stdout.splitlines()
        keys[p.node] = (out[0].strip(), out[1].strip())
    done = []
    for p in plans:
        for o in plans:
            if o is p:
                continue
            conns[o.node].run_script(INSTALL_SH, keys[p.node][0], timeout=30, check=True)
            kind, blob = keys[o.node][1].split()
            said = conns[p.node].run_script(KNOWN_SH, o.fabric_ip, kind, blob, timeout=30, check=True).stdout
            done.append(f"{p.node}: {o.node}'s host key at {o.fabric_ip} {said.strip()}")
            conns[p.node].run_script(PROVE_SH, o.fabric_ip, str(port), timeout=30, check=True)
            done.append(f"{p.node} -> {o.node} ({o.fabric_ip}): ssh ok")
    return done
