"""`spark-deploy export k8s`: the Plan `up` runs, as a LeaderWorkerSet and a Service for its leader.

Pure: a Deployment in, manifests and a header out. The argv comes from the plan (lws_ranks), never from a
second template, so the plan hash in the header is the identity of what the pods run.
"""

from __future__ import annotations

import io
import re
from dataclasses import dataclass, field

from ruamel.yaml import YAML

from ..config.load import Deployment
from ..render.labels import Label
from ..render.plan import PREVIEW_RUN, Plan, build_plan
from .lws_pods import PodOptions, pod_template
from .lws_ranks import ExportError, Substitution, leader_and_worker

API_VERSION = "leaderworkerset.x-k8s.io/v1"
SET_NAME_LABEL = "leaderworkerset.sigs.k8s.io/name"
WORKER_INDEX_LABEL = "leaderworkerset.sigs.k8s.io/worker-index"
_LABEL_VALUE = re.compile(r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$")
_DIGEST_REF = re.compile(r"^[^@\s]+@sha256:[0-9a-f]{64}$")

# What `up` does that the export does not carry, and what takes its place (the header lists these).
NOT_CARRIED = (
    ("preflight (SSH, fabric, RoCE, memory, image, model, vLLM flag checks)",
     "nothing in Kubernetes: run `spark-deploy preflight RECIPE` against the nodes before applying"),
    ("the per-node JIT cache token test",
     "the JIT cache is the node's own hostPath and a required pod anti-affinity keeps two ranks off one node"),
    ("log expectations (MoE backend line, CUDA graph profile agreement across ranks)",
     "nothing: read them with `kubectl logs` (leader and worker) after the set is ready"),
    ("releases: history, rollback, automatic restore of the previous release",
     "the LeaderWorkerSet's own rolling update; keep the previous export to roll back by applying it"),
    ("the docker restart policy and boot units",
     "restartPolicy RecreateGroupOnPodRestart: a failed pod restarts its whole group, with no retry cap"),
    ("`--ulimit memlock=-1`", "no pod field: the container runtime's default must allow it (containerd "
                             "ships LimitMEMLOCK=infinity)"),
    ("the env-file on each node holding the secrets",
     "a Secret referenced by name; this file never holds a value"),
    ("`--master-addr` = the head's fabric IP",
     "the leader pod's address (LWS_LEADER_ADDRESS); NCCL and Gloo still use the fabric interface the "
     "inventory names (NCCL_SOCKET_IFNAME, GLOO_SOCKET_IFNAME)"),
)


@dataclass(frozen=True)
class K8sOptions:
    namespace: str = "default"
    image_ref: str | None = None  # REPO@sha256:DIGEST the cluster pulls; default the recipe's ref if it is one
    secret_name: str | None = None
    hf_cache_claim: str | None = None
    rdma_resource: str | None = None
    ready_timeout: float = 5400.0
    version: str = "unknown"


@dataclass
class K8sExport:
    plan: Plan
    name: str
    manifests: list[dict]
    substitutions: dict[str, tuple[Substitution, ...]]  # "leader" / "worker"
    header: list[str] = field(default_factory=list)

    def yaml(self) -> str:
        out = io.StringIO()
        out.write("".join(f"# {line}\n" if line else "#\n" for line in self.header))
        dumper = YAML()
        dumper.width = 4096  # one vLLM token per line, never folded
        dumper.explicit_start = True
        dumper.representer.ignore_aliases = lambda *_: True  # shared dicts written out, never as &anchors
        dumper.dump_all(self.manifests, out)
        return out.getvalue()


def set_name(recipe: str) -> str:
    """A DNS-1035 label for the LeaderWorkerSet and its Service (LWS appends `-GROUP-INDEX` to pod names)."""
    name = re.sub(r"[^a-z0-9-]+", "-", f"sd-{recipe}".lower()).strip("-")
    return name[:40].rstrip("-")


def image_reference(dep: Deployment, opts: K8sOptions) -> str:
    image = dep.recipe.image
    if not image.id:
        raise ExportError(f"recipe {dep.recipe.name!r} is not pinned (image.id is empty): run `spark-deploy pin` "
                          "first; an export pulls exactly the image `up` verified")
    ref = opts.image_ref or (image.ref if _DIGEST_REF.match(image.ref) else None)
    if not ref:
        raise ExportError(f"the image {image.ref!r} is a tag, which a registry can move: push the pinned image "
                          f"({image.id}) and pass --image-ref REPO@sha256:DIGEST (the digest `docker push` prints)")
    if not _DIGEST_REF.match(ref):
        raise ExportError(f"--image-ref {ref!r} must be REPO@sha256:<64 hex digits>: a tag can move")
    return ref


def _labels(plan: Plan) -> tuple[dict, dict]:
    """The containers' label vocabulary: valid Kubernetes label values as labels, the rest as annotations."""
    labels = {str(Label.MANAGED): "true", str(Label.CLUSTER): plan.cluster, str(Label.RECIPE): plan.recipe,
              str(Label.PLAN_HASH): plan.plan_hash}
    annotations = {str(Label.RECIPE_DIGEST): plan.recipe_digest, str(Label.WORLD): str(len(plan.ranks)),
                   str(Label.SERVED_MODEL): plan.head.labels.served_model, "spark-deploy.image-id": plan.image_id}
    for key, value in list(labels.items()):
        if len(value) > 63 or not _LABEL_VALUE.match(value):
            annotations[key] = labels.pop(key)
    return labels, annotations


def export_k8s(dep: Deployment, opts: K8sOptions) -> K8sExport:
    plan = build_plan(dep, PREVIEW_RUN)
    image = image_reference(dep, opts)
    leader_cmd, worker_cmd = leader_and_worker(plan)
    name = set_name(plan.recipe)
    secret = opts.secret_name or f"{name}-secrets"
    pods = PodOptions(image=image, secret_name=secret, secrets=tuple(dep.recipe.secrets),
                      ready_timeout=opts.ready_timeout, hf_cache_claim=opts.hf_cache_claim,
                      rdma_resource=opts.rdma_resource, roce=dep.inventory.interconnect.profile == "roce")
    labels, annotations = _labels(plan)
    meta = {"name": name, "namespace": opts.namespace, "labels": labels, "annotations": annotations}
    leader = pod_template(plan.head, leader_cmd, pods, {**labels, "role": "leader"}, annotations, True, name)
    worker_launch = plan.peers[0] if plan.peers else plan.head
    worker = pod_template(worker_launch, worker_cmd or leader_cmd, pods, {**labels, "role": "worker"},
                          annotations, False, name)
    lws = {"apiVersion": API_VERSION, "kind": "LeaderWorkerSet", "metadata": meta, "spec": {
        "replicas": 1,
        # LeaderCreated, not LeaderReady: vLLM's leader is ready only once its workers joined, so waiting for it
        # would deadlock; the workers' init container waits for the leader's rendezvous port instead.
        "startupPolicy": "LeaderCreated",
        "leaderWorkerTemplate": {"size": len(plan.ranks), "restartPolicy": "RecreateGroupOnPodRestart",
                                 "leaderTemplate": leader, "workerTemplate": worker}}}
    port = plan.head.spec.serve_port
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {**meta}, "spec": {
        "type": "ClusterIP",
        "selector": {SET_NAME_LABEL: name, WORKER_INDEX_LABEL: "0"},
        "ports": [{"name": "http", "port": port, "targetPort": port, "protocol": "TCP"}]}}
    subs = {"leader": leader_cmd.substitutions, "worker": worker_cmd.substitutions if worker_cmd else ()}
    export = K8sExport(plan, name, [lws, service], subs)
    export.header = _header(export, dep, image, secret, opts)
    return export


def _header(export: K8sExport, dep: Deployment, image: str, secret: str, opts: K8sOptions) -> list[str]:
    plan = export.plan
    lines = [f"spark-deploy {opts.version}: `export k8s` of recipe {plan.recipe} on cluster {plan.cluster}",
             f"plan hash {plan.plan_hash} (as `spark-deploy render --json` shows), recipe digest {plan.recipe_digest}",
             f"image {image}: the registry reference of the pinned image ID {plan.image_id}",
             "  (after a pull, `crictl inspecti` on a node shows that ID: it is the image's config digest)",
             f"ranks: {len(plan.ranks)} (leader = rank 0 on {plan.head.node.name}; workers = "
             f"{', '.join(r.node.name for r in plan.peers) or 'none'})", "",
             "the plan's argv, with these values replaced by what LeaderWorkerSet injects:"]
    for role, subs in export.substitutions.items():
        lines += [f"  {role}: {s.flag} {s.planned} -> {s.exported}" for s in subs]
    if dep.recipe.secrets:
        lines += ["", f"secrets {', '.join(dep.recipe.secrets)} come from the Secret {secret!r} (create it from a "
                      f"0600 file: kubectl create secret generic {secret} --from-env-file=FILE)"]
    lines += ["", "not carried over, and what takes its place:"]
    lines += [f"  - {what}: {instead}" for what, instead in NOT_CARRIED]
    if dep.inventory.interconnect.profile == "roce":
        lines += ["", "RDMA: IPC_LOCK is added; " + (
            f"the HCA comes from the device plugin resource {opts.rdma_resource}" if opts.rdma_resource else
            "/dev/infiniband is a hostPath in a privileged container (pass --rdma-resource to use a device "
            "plugin instead)") + "; hostNetwork keeps the fabric interface by its name"]
    return lines
