"""The leader's and the worker's pod templates: the container, its volumes, probes and placement.

Docker options map one to one where Kubernetes has the field (`--network host` → hostNetwork, `--ipc host`
→ hostIPC, `--shm-size` → a memory-backed /dev/shm, `--gpus` → `nvidia.com/gpu`); what has no field is
named in the export's header (lws.NOT_CARRIED), never dropped silently.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from ..render.plan import RankLaunch
from ..render.unit import PEER_WAIT_SECONDS, STOP_SECONDS
from .lws_ranks import LWS_LEADER_ADDRESS, PodCommand
from .quantity import docker_size_quantity

PROBE_PERIOD = 10  # seconds between /health probes
# One TCP connect per attempt, bounded by $3 seconds in all; the image's own python3 (vLLM needs it), so no
# second image. Arguments: leader address, rendezvous port, seconds.
_WAIT_FOR_LEADER = (
    "import socket, sys, time\n"
    "host, port, limit = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])\n"
    "start = time.monotonic()\n"
    "print(f\"waiting for the leader's rendezvous at {host}:{port} (up to {limit:.0f} s)\", flush=True)\n"
    "while True:\n"
    "    try:\n"
    "        socket.create_connection((host, port), timeout=3).close()\n"
    "        break\n"
    "    except OSError:\n"
    "        if time.monotonic() - start >= limit:\n"
    "            sys.exit(f\"the leader's rendezvous at {host}:{port} did not listen within {limit:.0f} s\")\n"
    "        time.sleep(2)\n"
    "print(f\"the leader's rendezvous at {host}:{port} listens\", flush=True)\n")


@dataclass(frozen=True)
class PodOptions:
    image: str  # the registry reference the pods pull (by digest)
    secret_name: str
    secrets: tuple[str, ...]
    ready_timeout: float
    hf_cache_claim: str | None = None  # a PVC instead of the node's hf_cache host path
    rdma_resource: str | None = None  # e.g. rdma/rdma_shared_device_a; else /dev/infiniband as a host path
    roce: bool = False


def _volumes(launch: RankLaunch, opts: PodOptions) -> tuple[list[dict], list[dict]]:
    spec = launch.spec
    volumes, mounts = [], []
    if spec.shm_size:
        volumes.append({"name": "dshm", "emptyDir": {"medium": "Memory",
                                                     "sizeLimit": docker_size_quantity(spec.shm_size)}})
        mounts.append({"name": "dshm", "mountPath": "/dev/shm"})
    for i, mount in enumerate(spec.mounts):
        name = ("hf-cache", "jit-cache")[i] if i < 2 else f"mount-{i - 1}"
        if name == "hf-cache" and opts.hf_cache_claim:
            volumes.append({"name": name, "persistentVolumeClaim": {"claimName": opts.hf_cache_claim}})
        else:  # the JIT cache is always the node's own directory: a shared one breaks DeepGEMM (field note 2)
            volumes.append({"name": name, "hostPath": {"path": mount.source, "type": "DirectoryOrCreate"
                                                       if name == "jit-cache" else "Directory"}})
        mounts.append({"name": name, "mountPath": mount.target, **({"readOnly": True} if mount.read_only else {})})
    if opts.roce and not opts.rdma_resource:
        volumes.append({"name": "infiniband", "hostPath": {"path": "/dev/infiniband", "type": "Directory"}})
        mounts.append({"name": "infiniband", "mountPath": "/dev/infiniband"})
    return volumes, mounts


def _env(command: PodCommand, opts: PodOptions) -> list[dict]:
    env = [{"name": k, "value": v} for k, v in command.env]
    env += [{"name": name, "valueFrom": {"secretKeyRef": {"name": opts.secret_name, "key": name}}}
            for name in opts.secrets]  # the value lives in the Secret, never in this file
    return env


def _health(port: int, failures: int) -> dict:
    return {"httpGet": {"path": "/health", "port": port}, "periodSeconds": PROBE_PERIOD,
            "timeoutSeconds": 5, "failureThreshold": failures}


def pod_template(launch: RankLaunch, command: PodCommand, opts: PodOptions, labels: dict, annotations: dict,
                 leader: bool, set_name: str) -> dict:
    spec = launch.spec
    volumes, mounts = _volumes(launch, opts)
    limits: dict = {"nvidia.com/gpu": launch.node.gpus}
    if opts.roce and opts.rdma_resource:
        limits[opts.rdma_resource] = 1
    security: dict = {}
    if spec.privileged or (opts.roce and not opts.rdma_resource):
        security["privileged"] = True  # /dev/infiniband as a host path needs it, as `docker --device` did not
    if opts.roce:
        security["capabilities"] = {"add": ["IPC_LOCK"]}  # RDMA pins memory
    container: dict = {
        "name": "vllm", "image": opts.image, "imagePullPolicy": "IfNotPresent",
        "args": list(command.args), "env": _env(command, opts),
        "resources": {"limits": limits}, "volumeMounts": mounts,
    }
    if security:
        container["securityContext"] = security
    if leader:
        container["ports"] = [{"name": "http", "containerPort": spec.serve_port, "protocol": "TCP"},
                              {"name": "rendezvous", "containerPort": spec.master_port, "protocol": "TCP"}]
        container["startupProbe"] = _health(spec.serve_port, max(1, math.ceil(opts.ready_timeout / PROBE_PERIOD)))
        container["readinessProbe"] = _health(spec.serve_port, 3)
    pod: dict = {
        "hostNetwork": spec.network == "host", "hostIPC": spec.ipc == "host",
        "terminationGracePeriodSeconds": STOP_SECONDS,
        # one rank per node: the JIT cache is per node, and a Spark has one GPU
        "affinity": {"podAntiAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": [{
            "labelSelector": {"matchLabels": {"leaderworkerset.sigs.k8s.io/name": set_name}},
            "topologyKey": "kubernetes.io/hostname"}]}},
        "containers": [container], "volumes": volumes,
    }
    if pod["hostNetwork"]:
        pod["dnsPolicy"] = "ClusterFirstWithHostNet"  # the leader's address is a cluster DNS name
    if not leader and spec.world > 1:
        pod["initContainers"] = [{
            "name": "wait-for-leader", "image": opts.image, "imagePullPolicy": "IfNotPresent",
            "command": ["python3", "-c", _WAIT_FOR_LEADER, LWS_LEADER_ADDRESS, str(spec.master_port),
                        str(PEER_WAIT_SECONDS)]}]
    return {"metadata": {"labels": labels, "annotations": annotations}, "spec": pod}
