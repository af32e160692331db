"""Names, addresses and the controller-side state directory of a simulated cluster."""

from __future__ import annotations

import hashlib
import ipaddress
import json
import os
import re
from dataclasses import asdict, dataclass
from enum import Enum
from pathlib import Path

LABEL = "spark-deploy.sim"  # value = cluster name, on every container, network and volume
INIT_LABEL = f"{LABEL}.init"  # on node containers: a NodeInit value (absent on nodes made before it: docker-init)
PREFIX = "sd-sim"
SUPERNET = ipaddress.ip_network("172.28.0.0/14")  # 1024 candidate /24s
FIRST_HOST = 11  # node i gets .10+i

NODE_HF_CACHE = "/srv/hf-cache"
NODE_JIT_CACHE = "/var/cache/vllm-jit"
NODE_STATE_DIR = "/var/lib/spark-deploy"
SHARED_MOUNT = "/shared"

# A Spark's links, named as DGX OS names them: the management port (the controller's SSH, the default
# route) and the two QSFP ports of the ConnectX-7 (the fabric between the nodes; the second is unplugged).
MGMT_IFACE = "enP7s7"
FABRIC_IFACE = "enp1s0f0np0"
FABRIC_IFACE_2 = "enp1s0f1np1"
NET_SPEC = "/etc/sim-net.json"

# A stock DGX OS login: the first user, in the docker group (and sudo, but sudo asks for a password it
# cannot be given over a batch SSH session). root stays reachable by key for tests that need it.
NODE_USER = "spark"
NODE_UID = 1000
NODE_USER_GROUPS = ("adm", "sudo", "docker")  # which address is which link: read by the node's `sim-boot net` at every boot

_NAME_RE = re.compile(r"^[a-z0-9][a-z0-9-]{0,29}$")


class SimError(RuntimeError):
    """Something about a simulated cluster failed (exit 1 in the CLI)."""


class SimInputError(ValueError):
    """A bad name, node or fault argument (exit 2 in the CLI)."""


@dataclass(frozen=True)
class NodeInfo:
    index: int        # 1-based
    name: str         # hostname, e.g. spark-1
    container: str    # sd-sim-<cluster>-<i>
    ip: str           # management address: what the controller reaches
    fabric_ip: str = ""  # the QSFP fabric address: only the other nodes reach it

    def to_dict(self) -> dict:
        return asdict(self)


class NodeInit(str, Enum):
    """What runs as PID 1 in a node: the proven docker-init node, or real systemd (opt-in)."""
    DOCKER_INIT = "docker-init"
    SYSTEMD = "systemd"

    @classmethod
    def parse(cls, value: NodeInit | str) -> NodeInit:
        try:
            return cls(value)
        except ValueError:
            raise SimInputError(f"init must be one of {', '.join(i.value for i in cls)}, got {value!r}") from None


def check_name(name: str) -> str:
    if not isinstance(name, str) or not _NAME_RE.match(name):
        raise SimInputError(
            f"bad cluster name {name!r}: use 1-30 of a-z, 0-9 and '-', starting with a letter or digit"
        )
    return name


def sim_home() -> Path:
    env = os.environ.get("SPARK_DEPLOY_SIM_HOME")
    return Path(env) if env else Path.home() / ".local" / "state" / "spark-deploy" / "sim"


def state_dir(name: str) -> Path:
    return sim_home() / check_name(name)


def network_name(name: str) -> str:
    return f"{PREFIX}-{name}"


def fabric_network_name(name: str) -> str:
    return f"{PREFIX}-{name}-fabric"


def container_name(name: str, index: int) -> str:
    return f"{PREFIX}-{name}-{index}"


def docker_volume_name(name: str, index: int) -> str:
    return f"{PREFIX}-{name}-{index}-docker"


def shared_volume_name(name: str) -> str:
    return f"{PREFIX}-{name}-shared"


def node_ip(subnet: str, index: int) -> str:
    net = ipaddress.ip_network(subnet)
    return str(net.network_address + FIRST_HOST - 1 + index)


def gateway_ip(subnet: str) -> str:
    return str(ipaddress.ip_network(subnet).network_address + 1)


def subnet_candidates(name: str) -> list[str]:
    """Every /24 of SUPERNET, starting at one derived from the name (same name -> same first choice)."""
    subnets = list(SUPERNET.subnets(new_prefix=24))
    start = int(hashlib.sha256(name.encode()).hexdigest(), 16) % len(subnets)
    return [str(s) for s in subnets[start:] + subnets[:start]]


def host_route_networks() -> list[ipaddress.IPv4Network]:
    """Destinations in the host's IPv4 routing table (so we never shadow an existing route)."""
    nets = []
    try:
        lines = Path("/proc/net/route").read_text().splitlines()[1:]
    except OSError:
        return nets
    for line in lines:
        f = line.split()
        if len(f) < 8:
            continue
        dest = ipaddress.IPv4Address(int(f[1], 16).to_bytes(4, "little"))
        mask = ipaddress.IPv4Address(int(f[7], 16).to_bytes(4, "little"))
        if int(mask) == 0:
            continue  # default route overlaps everything by definition
        nets.append(ipaddress.IPv4Network(f"{dest}/{mask}", strict=False))
    return nets


def free_subnets(name: str, used: list[str]) -> list[str]:
    taken = [ipaddress.ip_network(u, strict=False) for u in used] + host_route_networks()
    return [c for c in subnet_candidates(name)
            if not any(ipaddress.ip_network(c).overlaps(t) for t in taken)]


def write_json(path: Path, doc: dict) -> None:
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps(doc, indent=2, sort_keys=True) + "\n")
    tmp.replace(path)


def read_cluster_json(name: str) -> dict | None:
    path = state_dir(name) / "cluster.json"
    if not path.exists():
        return None
    return json.loads(path.read_text())
