"""The inventory: which machines form the cluster, how to reach them, and their fabric."""

from __future__ import annotations

import posixpath
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

from .hints import closest, fixed
from .types import SECRET_NAME, TOKEN_VALUE, AbsPath, EnvName, Host, IPAddress, Name, NodeName, Port, Text


class Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class SSHDefaults(Model):
    """How the controller logs in. Host keys must already be in `known_hosts`: unknown keys are refused."""

    user: Name = Field("root", description="The SSH user on every node.")
    port: Port = Field(22, description="The SSH port.", examples=[22])
    key: AbsPath | None = Field(None, description="The private key (absolute path; `~` is not expanded). Unset: "
                                "ssh-agent and ~/.ssh's default keys.", examples=["/home/you/.ssh/id_ed25519"])
    known_hosts: AbsPath | None = Field(None, description="The file the nodes' host keys must already be in "
                                        "(unset: ~/.ssh/known_hosts).")


class NodeSSH(Model):
    """This node's exceptions to the top-level `ssh`."""

    user: Name | None = Field(None, description="This node's SSH user.")
    port: Port | None = Field(None, description="This node's SSH port.", examples=[22])
    key: AbsPath | None = Field(None, description="This node's private key (absolute path).")


class Node(Model):
    """One machine: how to reach it, its fabric address, its caches."""

    name: NodeName = Field(description="The node's name in messages, labels and --node.", examples=["spark-1"])
    address: Host = Field(description="Where the controller reaches the node over SSH.")
    fabric_ip: IPAddress = Field(description="The node's address on the fast fabric (rendezvous and NCCL).")
    gpus: int = Field(default=1, ge=1, le=8, description="GPUs on the node (1 on a DGX Spark).")
    jit_cache: AbsPath = Field(description="Host directory for vLLM's JIT caches, its own (not inside hf_cache). "
                               "Absolute: `~` is not expanded, since it would be the SSH user's home on the node.",
                               examples=["/home/spark/.cache/vllm-jit"])
    hf_cache: AbsPath = Field(description="Host directory of the Hugging Face cache (absolute, no `~`).",
                              examples=["/home/spark/.cache/huggingface"])
    state_dir: AbsPath = Field("/var/lib/spark-deploy", description="Where spark-deploy keeps its files on the node "
                               "(release records, the lock, the secrets env-file).")
    env: dict[EnvName, Text] = Field({}, description="This node's extra container environment, e.g. a "
                                     "NCCL_IB_GID_INDEX that differs from the others (not secrets).")
    ssh: NodeSSH | None = Field(None, description="This node's SSH exceptions.")


_ROCE_EXAMPLE = {"hca": "`hca: rocep1s0f1`", "gid_index": "`gid_index: 3`"}


class Interconnect(Model):
    """One profile for the whole cluster; per-node differences go in `nodes[].env`."""

    profile: Literal["roce", "tcp"] = Field(description="roce: NCCL over RDMA (needs hca and gid_index); tcp: sockets "
                                            "only (NCCL_IB_DISABLE=1).")
    socket_ifname: Text = Field(description="NCCL_SOCKET_IFNAME: the fabric interface.", examples=["enp1s0f1np1"])
    hca: Text | None = Field(default=None, validate_default=True, description="NCCL_IB_HCA (profile roce only), e.g. rocep1s0f1.")
    gid_index: int | None = Field(default=None, ge=0, le=255, validate_default=True,
                                  description="NCCL_IB_GID_INDEX (profile roce only): the RoCE v2 GID, e.g. 3.")

    @field_validator("hca", "gid_index")
    @classmethod
    def _fits_profile(cls, value, info: ValidationInfo):
        """Checked per field (not per model) so the error names the offending key's own line."""
        variable = {"hca": "NCCL_IB_HCA", "gid_index": "NCCL_IB_GID_INDEX"}[info.field_name]
        profile = info.data.get("profile")
        if profile == "roce" and value is None:
            raise ValueError(fixed(f"profile roce needs {info.field_name} ({variable})",
                                   f"add {_ROCE_EXAMPLE[info.field_name]} under `interconnect:` (`spark-deploy setup` "
                                   "finds it on the nodes), or write `profile: tcp`"))
        if profile == "tcp" and value is not None:
            raise ValueError(fixed(f"profile tcp takes no {info.field_name} (NCCL_IB_DISABLE=1)",
                                   f"delete the `{info.field_name}:` line, or write `profile: roce`"))
        return value


class Inventory(Model):
    """The machines of one cluster and how to reach them."""

    cluster: Name = Field(description="The cluster's name: a label in messages. What the records, the lock, the "
                          "audit log and the containers are keyed by is the identity the head holds "
                          "(docs/releases.md).", examples=["lab"])
    cluster_id: Name | None = Field(None, description="The identity the head holds (`setup` records it): a "
                                    "command refuses when the head holds another. Unset: the head's, whatever it "
                                    "is (a head that holds none takes the `cluster:` name).", examples=["lab"])
    head: NodeName = Field(description="The node that runs rank 0 and the API; one of the nodes' names.",
                           examples=["spark-1"])
    interconnect: Interconnect = Field(description="How the nodes talk: the fabric NCCL uses.")
    ssh: SSHDefaults = Field(SSHDefaults(), description="How the controller logs in to every node.")
    nodes: list[Node] = Field(min_length=1, max_length=64, description="The machines, head included; rank order "
                              "is the head, then the others in file order.")

    @property
    def ranked(self) -> list[Node]:
        """Nodes in rank order: the head is rank 0, the others follow in file order."""
        head = [n for n in self.nodes if n.name == self.head]
        return head + [n for n in self.nodes if n.name != self.head]

    def node(self, name: str) -> Node:
        for node in self.nodes:
            if node.name == name:
                return node
        raise KeyError(name)

    @property
    def key(self) -> str:
        """The identity this inventory expects before its head has said which one it holds."""
        return self.cluster_id or self.cluster

    @property
    def gpu_count(self) -> int:
        return sum(n.gpus for n in self.nodes)


def _within(path: str, directory: str) -> bool:
    """`path` is `directory` or below it (paths are normalised: absolute, no trailing '/', except '/')."""
    return path == directory or path.startswith(directory.rstrip("/") + "/")


_DUPLICATE_FIX = {
    "name": "give each node its own name (`name: spark-2`)",
    "address": "write this node's own address: each node is another machine",
    "fabric_ip": "write this node's own fabric address (`ip -4 addr show` on the node lists it)",
}


def inventory_problems(inv: Inventory) -> list[tuple[tuple, str]]:
    """Cross-field problems as (location, message); the loader turns locations into file:line."""
    problems: list[tuple[tuple, str]] = []
    seen: dict[tuple[str, str], int] = {}
    for i, node in enumerate(inv.nodes):
        for field in ("name", "address", "fabric_ip"):
            value = getattr(node, field)
            first = seen.setdefault((field, value), i)
            if first != i:
                problems.append((("nodes", i, field), fixed(f"duplicate {field} {value!r} (also nodes[{first}])",
                                                            _DUPLICATE_FIX[field])))
        if _within(node.jit_cache, node.hf_cache) or _within(node.hf_cache, node.jit_cache):
            own = posixpath.join(posixpath.dirname(node.hf_cache.rstrip("/")) or "/", "vllm-jit")
            problems.append((("nodes", i, "jit_cache"), fixed(
                "the JIT cache must be its own directory, not the HF cache or inside it (field note 2)",
                f"give it a directory beside the HF cache: `jit_cache: {own}`")))
        for key, value in node.env.items():
            if SECRET_NAME.search(key) or TOKEN_VALUE.match(value):
                problems.append((("nodes", i, "env", key), fixed(f"{key} looks like a secret given as a literal value",
                                                                 f"delete this line; export {key} in your shell and "
                                                                 f"list `- {key}` under the recipe's `secrets:`")))
    if inv.head not in {n.name for n in inv.nodes}:
        names = [n.name for n in inv.nodes]
        meant = closest(inv.head, names) or names[0]
        problems.append((("head",), fixed(f"head {inv.head!r} is not one of the nodes ({', '.join(names)})",
                                          f"write `head: {meant}`")))
    return problems
