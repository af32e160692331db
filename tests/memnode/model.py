"""The model an in-memory node answers from: containers, images and files per node, and what the vLLM
stand-in does once started (its log lines, its rendezvous port, its peers joining, its API).

Test code, not the product. Shapes come from tests/unit/fakes.py (captured from a simulated node).
"""

from __future__ import annotations

import copy
import enum
import secrets
import threading
import time
import uuid
from dataclasses import dataclass, field

from orchestrator.render.labels import ContainerLabels
from orchestrator.sim.standin.base import MOE_BACKENDS

from fakes import IMAGE_ID, container_inspect, image_inspect

COMMIT = "5f1c0ffee5f1c0ffee5f1c0ffee5f1c0ffee5f1c"  # what every node's HF cache resolves a revision to


class Fault(enum.Enum):
    """What the next vLLM container started on a node does instead of serving (consumed by that start)."""

    DIE_AT_START = "logs an engine failure and exits 1 at once"
    NEVER_READY = "runs and joins, but /health never answers 200"
    WRONG_BACKEND = "serves, but logs another MoE backend than asked for"
    NAN_LOGPROBS = "serves, but every logprob it answers is NaN (the stand-in's SIM_FAULT_LOGPROBS_NAN)"


def stamp(at: float) -> str:
    """Docker's RFC 3339 timestamp with nanoseconds."""
    whole = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(at))
    return f"{whole}.{int((at % 1) * 1e9):09d}Z"


@dataclass
class Image:
    id: str
    tags: list[str]
    layers: tuple[str, ...]
    size: int = 120090624
    labels: dict[str, str] = field(default_factory=dict)  # docker merges them into a container's Config.Labels
    entrypoint: tuple[str, ...] = ("vllm", "serve")  # the stand-in's (`serve_entrypoint: true` recipes)

    def inspect(self) -> dict:
        data = image_inspect(self.id, tags=tuple(self.tags), layers=self.layers)
        data["Size"] = self.size
        return data


@dataclass
class Container:
    id: str
    name: str
    image: str
    argv: list[str]  # what follows the image in `docker run` (the serve args)
    labels: dict[str, str]
    env: dict[str, str]
    state: str = "created"  # created | running | exited
    exit_code: int = 0
    started_at: str = "0001-01-01T00:00:00Z"
    finished_at: str = "0001-01-01T00:00:00Z"
    restart: str = "no"
    logs: list[tuple[float, str]] = field(default_factory=list)
    fault: Fault | None = None  # what its current run does

    @property
    def running(self) -> bool:
        return self.state == "running"

    @property
    def ours(self) -> ContainerLabels | None:
        return ContainerLabels.parse(self.labels)

    entrypoint: tuple[str, ...] = ("vllm", "serve")

    def inspect(self) -> dict:
        """One element of `docker container inspect`, as fakes.container_inspect shapes it: Path is the
        entrypoint's first word, Args the rest of it and then the command."""
        data = container_inspect(self.name, self.labels, status=self.state, exit_code=self.exit_code,
                                 container_id=self.id, image=self.image, args=[*self.entrypoint[1:], *self.argv])
        data["Path"] = self.entrypoint[0]
        data["Config"]["Entrypoint"] = list(self.entrypoint)
        data["Config"]["Cmd"] = list(self.argv)
        data["State"].update({"StartedAt": self.started_at, "FinishedAt": self.finished_at,
                              "Pid": 644 if self.running else 0})
        data["HostConfig"] = {"RestartPolicy": {"Name": self.restart, "MaximumRetryCount": 0}}
        data["Config"]["Env"] = [f"{k}={v}" for k, v in self.env.items()]
        return data

    def arg(self, flag: str) -> str | None:
        for i, token in enumerate(self.argv):
            if token == flag and i + 1 < len(self.argv):
                return self.argv[i + 1]
            if token.startswith(flag + "="):
                return token.split("=", 1)[1]
        return None


@dataclass
class Node:
    """One node: its engine's containers and images, its files, its faults."""

    name: str
    address: str
    fabric_ip: str
    world: "World"
    containers: dict[str, Container] = field(default_factory=dict)  # by ID
    images: dict[str, Image] = field(default_factory=dict)  # by ID
    files: dict[str, str] = field(default_factory=dict)  # path -> content
    unreachable: str | None = None  # why SSH to it fails
    faults: list[Fault] = field(default_factory=list)  # consumed by the next vLLM starts, in order
    traps: list = field(default_factory=list)  # (matches(command), action) run when a command arrives
    commits: dict[tuple[str, str], str] = field(default_factory=dict)  # (repo, revision) -> commit
    systemd: object = None  # memnode.systemd.Systemd, set by World.add
    boot_id: str = field(default_factory=lambda: str(uuid.uuid4()))  # /proc/sys/kernel/random/boot_id

    # ---- lookups ------------------------------------------------------------------------------
    def container(self, ref: str) -> Container | None:
        for c in self.containers.values():
            if ref in (c.id, c.name, "/" + c.name) or (len(ref) >= 12 and c.id.startswith(ref)):
                return c
        return None

    def image(self, ref: str) -> Image | None:
        for image in self.images.values():
            if ref == image.id or ref in image.tags or (len(ref) >= 12 and image.id.startswith(("sha256:" + ref, ref))):
                return image
        return None

    def commit(self, repo: str, revision: str) -> str:
        return self.commits.get((repo, revision), COMMIT)

    # ---- the engine ---------------------------------------------------------------------------
    def log(self, container: Container, line: str) -> None:
        with self.world.changed:
            container.logs.append((self.world.now(), line))
            self.world.changed.notify_all()

    def start(self, container: Container) -> None:
        """What the stand-in does when started: load, print its settings, listen (head) or join (peer),
        or fail the way a queued fault says."""
        if container.running:
            return
        with self.world.changed:
            at = self.world.now()
            container.state, container.exit_code = "running", 0
            container.started_at, container.finished_at = stamp(at), "0001-01-01T00:00:00Z"
            vllm = container.ours is not None
            container.fault = self.faults.pop(0) if vllm and self.faults else None
            self.world.changed.notify_all()
        if not vllm:
            return
        rank = container.ours.rank
        self.log(container, "INFO [api_server.py:1351] vLLM API server version 0.33.0")
        if container.fault is Fault.DIE_AT_START:
            self.log(container, "ERROR [core.py:708] RuntimeError: CUDA error: an illegal memory access was "
                                "encountered")
            self.log(container, "ERROR [core.py:711] Engine core initialization failed. See root cause above.")
            self.stop(container, code=1)
            return
        self.log(container, "INFO [default_loader.py:267] Loading safetensors checkpoint shards: 100% "
                            "Completed | 1/1")
        backend = MOE_BACKENDS.get(container.arg("--moe-backend") or "auto") or "TRITON"
        if container.fault is Fault.WRONG_BACKEND:
            backend = "MARLIN"
        self.log(container, f"INFO [mxfp4.py:312] Using '{backend}' Mxfp4 MoE backend.")
        self.log(container, "INFO [gpu_model_runner.py:6304] Profiling CUDA graph memory: 0.38 GiB for 35 "
                            "graphs")
        self.log(container, "INFO [gpu_worker.py:391] Available KV cache memory: 52.34 GiB")
        if rank == 0:
            self.log(container, "INFO [kv_cache_utils.py:1291] GPU KV cache size: 1,228,288 tokens, Maximum "
                                "concurrency for 4,096 tokens per request: 299.88x")
            self.log(container, "INFO [launcher.py:46] Route: /v1/completions, Methods: POST")
            if container.fault is not Fault.NEVER_READY:
                self.log(container, "INFO:     Application startup complete.")

    def stop(self, container: Container, code: int = 0) -> None:
        with self.world.changed:
            if container.running:
                container.state, container.exit_code = "exited", code
                container.finished_at = stamp(self.world.now())
            self.world.changed.notify_all()

    # ---- what `ss` sees -----------------------------------------------------------------------
    def heads(self) -> list[Container]:
        return [c for c in self.containers.values() if c.running and c.ours and c.ours.rank == 0]

    def listening(self) -> list[int]:
        """Ports open on this node: a running head holds its master port and its serve port."""
        return sorted({p for c in self.heads() for p in (c.ours.master_port, c.ours.serve_port)})

    def joined(self, addr: str, port: int) -> bool:
        """A running peer here holds a connection to a head listening at addr:port."""
        head = self.world.by_fabric(addr)
        if head is None or port not in head.listening():
            return False
        return any(c.running and c.ours and c.ours.rank > 0 and c.ours.master_port == port
                   for c in self.containers.values())


class World:
    """The nodes of one simulated cluster, one clock and one condition every change notifies."""

    def __init__(self) -> None:
        self.nodes: dict[str, Node] = {}
        self.changed = threading.Condition()
        self.unknown: list[str] = []  # commands the fake could not answer (a test fails on any)
        self._last = 0.0

    def now(self) -> float:
        """Wall time, strictly increasing: log lines keep their order through `--since`."""
        with self.changed:
            self._last = max(time.time(), self._last + 1e-6)
            return self._last

    def add(self, name: str, address: str, fabric_ip: str, images: tuple[Image, ...] = ()) -> Node:
        from .systemd import Systemd
        node = Node(name, address, fabric_ip, self, systemd=Systemd())
        for image in images:
            node.images[image.id] = copy.deepcopy(image)
        self.nodes[name] = node
        return node

    def by_fabric(self, addr: str) -> Node | None:
        return next((n for n in self.nodes.values() if addr in (n.fabric_ip, n.address, n.name)), None)

    def by_address(self, host: str) -> Node | None:
        return next((n for n in self.nodes.values() if host in (n.address, n.name)), None)

    def ready(self, head: Container) -> bool:
        """The head serves once every rank of its world runs its plan (the stand-in's rendezvous) and no
        fault holds it back."""
        labels = head.ours
        if not head.running or head.fault is Fault.NEVER_READY:
            return False
        ranks = {c.ours.rank for n in self.nodes.values() for c in n.containers.values()
                 if c.running and c.ours and c.ours.plan_hash == labels.plan_hash and c.ours.cluster == labels.cluster}
        return ranks >= set(range(labels.world))


def new_id() -> str:
    return secrets.token_hex(32)


def sim_image() -> Image:
    """The stand-in image as fakes.py knows it (ID and DiffIDs captured from a simulated node)."""
    data = image_inspect()
    labels = {"spark-deploy.sim.kind": "vllm", "spark-deploy.sim.build": "vllm",
              "spark-deploy.sim.hash": "6bf55dc7c41e5470d760b1cce5cfb283dd5838eb9e7e0547e706b577d0d794cc"}
    return Image(IMAGE_ID, list(data["RepoTags"]), tuple(data["RootFS"]["Layers"]), labels=labels)
