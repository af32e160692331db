"""Issue 24: `export k8s` writes the plan `up` runs as a LeaderWorkerSet and a Service, validated against the
LWS CRD's own schema (tests/data/lws, see SOURCE.md) and Kubernetes' (kubernetes-validate, pinned)."""

from __future__ import annotations

import copy
import gzip
import subprocess
import sys
from functools import lru_cache
from pathlib import Path

import jsonschema
import kubernetes_validate
import pytest
from ruamel.yaml import YAML

from fakes import IMAGE_ID, INVENTORY, _dump, deployment
from orchestrator.config.load import load_deployment
from orchestrator.export.lws import K8sOptions, export_k8s
from orchestrator.export.lws_ranks import LWS_GROUP_SIZE, LWS_LEADER_ADDRESS, LWS_WORKER_INDEX, ExportError
from orchestrator.export.quantity import docker_size_quantity
from orchestrator.render.plan import PREVIEW_RUN, build_plan
import cli_json

ROOT = Path(__file__).resolve().parents[2]
CRD = ROOT / "tests/data/lws/leaderworkerset.x-k8s.io_leaderworkersets.yaml.gz"
K8S_VERSION = "1.37.0"  # the schemas kubernetes-validate==1.37.0 ships
DIGEST_REF = "registry.example/vllm@sha256:" + "b" * 64
SHIPPED = sorted((ROOT / "recipes").glob("*.yaml")) + [ROOT / "orchestrator/sim/recipes/sim-tiny.yaml"]


@lru_cache(maxsize=1)
def lws_schema() -> dict:
    crd = YAML(typ="safe").load(gzip.decompress(CRD.read_bytes()))
    (v1,) = [v for v in crd["spec"]["versions"] if v["name"] == "v1"]
    return v1["schema"]["openAPIV3Schema"]


def _pinned(path: Path, directory: Path, edit=None) -> Path:
    data = YAML(typ="safe").load(path.read_text())
    data["image"]["id"] = IMAGE_ID
    if edit:
        edit(data)
    return _dump(data, directory / path.name)


def _inventory(directory: Path, edit=None) -> Path:
    data = copy.deepcopy(INVENTORY)
    if edit:
        edit(data)
    return _dump(data, directory / "inventory.yaml")


def _validate(manifests: list[dict]) -> None:
    lws, service = manifests
    jsonschema.validate(lws, lws_schema())
    kubernetes_validate.validate(service, K8S_VERSION, strict=True)
    for role in ("leaderTemplate", "workerTemplate"):
        template = lws["spec"]["leaderWorkerTemplate"][role]
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": "p", **template["metadata"]},
               "spec": template["spec"]}
        kubernetes_validate.validate(pod, K8S_VERSION, strict=True)


@pytest.mark.parametrize("recipe", SHIPPED, ids=lambda p: p.stem)
def test_every_shipped_recipe_exports_objects_both_schemas_accept(recipe, tmp_path):
    dep = load_deployment(_pinned(recipe, tmp_path), _inventory(tmp_path))
    export = export_k8s(dep, K8sOptions(image_ref=DIGEST_REF))
    _validate(export.manifests)
    lws = export.manifests[0]["spec"]
    assert lws["leaderWorkerTemplate"]["size"] == len(dep.inventory.nodes)
    assert lws["leaderWorkerTemplate"]["restartPolicy"] == "RecreateGroupOnPodRestart"
    assert lws["startupPolicy"] == "LeaderCreated"


def test_the_schemas_are_strict_enough_to_refuse_a_broken_export(tmp_path):
    """The validation above can fail: a misspelt field and a wrong enum are caught."""
    dep = load_deployment(_pinned(SHIPPED[0], tmp_path), _inventory(tmp_path))
    manifests = export_k8s(dep, K8sOptions(image_ref=DIGEST_REF)).manifests
    broken = copy.deepcopy(manifests)
    broken[0]["spec"]["leaderWorkerTemplate"]["restartPolicy"] = "Always"
    with pytest.raises(jsonschema.ValidationError):
        _validate(broken)
    broken = copy.deepcopy(manifests)
    broken[0]["spec"]["leaderWorkerTemplate"]["workerTemplate"]["spec"]["containers"][0]["argz"] = []
    with pytest.raises(kubernetes_validate.ValidationError):
        _validate(broken)


def _args_back(args: list[str], substitutions) -> list[str]:
    """The exported args with LWS's variables put back to this rank's planned values."""
    back = {(s.flag, s.exported): s.planned for s in substitutions}
    out = list(args)
    for i in range(1, len(out)):
        out[i] = back.get((out[i - 1], out[i]), out[i].replace("$$(", "$("))
    return out


def _after_image(argv: tuple[str, ...], image_id: str) -> list[str]:
    return list(argv[len(argv) - 1 - argv[::-1].index(image_id) + 1:])


def _tp(size: int):
    return lambda recipe: recipe["vllm"].update({"tensor_parallel_size": size})


def _four_nodes(inv: dict) -> None:
    for n in (3, 4):
        inv["nodes"].append({**inv["nodes"][1], "name": f"spark-{n}", "address": f"spark-{n}.local",
                             "fabric_ip": f"192.168.100.{n}"})


@pytest.mark.parametrize("nodes", [2, 4])
def test_leader_and_worker_commands_are_the_plan_argv_but_for_the_listed_substitutions(tmp_path, nodes):
    dep = deployment(tmp_path, recipe=_tp(nodes), inventory=_four_nodes if nodes == 4 else None)
    export = export_k8s(dep, K8sOptions(image_ref=DIGEST_REF))
    plan = build_plan(dep, PREVIEW_RUN)
    templates = export.manifests[0]["spec"]["leaderWorkerTemplate"]
    for launch in plan.ranks:
        role = "leader" if launch.is_head else "worker"
        container = templates[f"{role}Template"]["spec"]["containers"][0]
        subs = [s for s in export.substitutions[role]]
        # the worker template is rank 1's; another worker's planned values are its own
        planned = {"--nnodes": str(nodes), "--node-rank": str(launch.rank), "--master-addr": "192.168.100.1"}
        subs = [type(s)(s.flag, planned[s.flag], s.exported) for s in subs]
        assert _args_back(container["args"], subs) == _after_image(launch.argv, plan.image_id)
        assert {(s.flag, s.exported) for s in subs} == {
            ("--nnodes", LWS_GROUP_SIZE), ("--node-rank", LWS_WORKER_INDEX), ("--master-addr", LWS_LEADER_ADDRESS)}
        assert [(e["name"], e["value"]) for e in container["env"] if "value" in e] == list(launch.spec.env)
    worker = templates["workerTemplate"]["spec"]
    assert "--headless" in worker["containers"][0]["args"]
    assert "--headless" not in templates["leaderTemplate"]["spec"]["containers"][0]["args"]
    (wait,) = worker["initContainers"]
    assert wait["command"][-3:] == [LWS_LEADER_ADDRESS, str(plan.head.spec.master_port), "600"]


def test_one_changed_vllm_arg_changes_exactly_that_token_in_the_export(tmp_path):
    base = export_k8s(deployment(tmp_path), K8sOptions(image_ref=DIGEST_REF))
    changed = export_k8s(deployment(tmp_path, recipe=lambda r: r["vllm"]["extra"].update({"max-num-seqs": 7})),
                         K8sOptions(image_ref=DIGEST_REF))
    for role in ("leaderTemplate", "workerTemplate"):
        a = base.manifests[0]["spec"]["leaderWorkerTemplate"][role]["spec"]["containers"][0]["args"]
        b = changed.manifests[0]["spec"]["leaderWorkerTemplate"][role]["spec"]["containers"][0]["args"]
        assert len(a) == len(b)
        assert [(x, y) for x, y in zip(a, b) if x != y] == [("12", "7")]
        assert a[a.index("--max-num-seqs") + 1] == "12"
    assert base.plan.plan_hash != changed.plan.plan_hash


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    import os
    return subprocess.run([sys.executable, "-c", "from orchestrator.cli.main import run; run()", *args],
                          capture_output=True, text=True, cwd=ROOT, env={**os.environ, **(env or {})})


def test_the_header_plan_hash_is_render_json_s_and_no_secret_value_is_written(tmp_path):
    marker = "hf_MARKERvalue0123456789abcdefSECRET"
    recipe = _pinned(SHIPPED[0], tmp_path)  # lists HF_TOKEN under secrets
    inventory = _inventory(tmp_path)
    env = {"HF_TOKEN": marker}
    rendered = _cli("render", str(recipe), "-i", str(inventory), "--json", env=env)
    assert rendered.returncode == 0, rendered.stderr
    plan_hash = cli_json.result(rendered.stdout)[0]["plan_hash"]
    done = _cli("export", "k8s", str(recipe), "-i", str(inventory), "-o", str(tmp_path / "out"), env=env)
    assert done.returncode == 0, done.stderr
    text = (tmp_path / "out" / "dspark-0731-b12x.k8s.yaml").read_text()
    assert f"# plan hash {plan_hash} " in text
    shown = _cli("export", "k8s", str(recipe), "-i", str(inventory), "--json", env=env)
    assert cli_json.result(shown.stdout)["plan_hash"] == plan_hash
    for output in (text, done.stdout, done.stderr, shown.stdout, shown.stderr):
        assert marker not in output
    assert "secretKeyRef" in text and "name: HF_TOKEN" in text


def test_unpinned_a_tag_and_a_bad_reference_are_refused_with_the_fix(tmp_path):
    unpinned = _pinned(SHIPPED[0], tmp_path, edit=lambda r: r["image"].update({"id": None}))
    inventory = _inventory(tmp_path)
    done = _cli("export", "k8s", str(unpinned), "-i", str(inventory))
    assert done.returncode == 2 and "is not pinned" in done.stderr and "spark-deploy pin" in done.stderr
    assert done.stdout == ""
    tagged = _pinned(SHIPPED[1], tmp_path)  # ref is a tag
    done = _cli("export", "k8s", str(tagged), "-i", str(inventory))
    assert done.returncode == 2 and "--image-ref REPO@sha256:DIGEST" in done.stderr
    done = _cli("export", "k8s", str(tagged), "-i", str(inventory), "--image-ref", "registry.example/vllm:latest")
    assert done.returncode == 2 and "must be REPO@sha256:" in done.stderr


def test_workers_that_differ_are_refused_naming_both_nodes(tmp_path):
    def differ(inv):
        _four_nodes(inv)
        inv["nodes"][3]["env"] = {"NCCL_IB_GID_INDEX": "5"}
    with pytest.raises(ExportError, match=r"spark-4 \(rank 3\) and spark-2 \(rank 1\) differ in env NCCL_IB_GID_INDEX"):
        export_k8s(deployment(tmp_path, recipe=_tp(4), inventory=differ), K8sOptions(image_ref=DIGEST_REF))


def test_options_shape_the_pods(tmp_path):
    export = export_k8s(deployment(tmp_path), K8sOptions(image_ref=DIGEST_REF, hf_cache_claim="models",
                                                         rdma_resource="rdma/hca", namespace="llm"))
    lws, service = export.manifests
    pod = lws["spec"]["leaderWorkerTemplate"]["leaderTemplate"]["spec"]
    assert {"name": "hf-cache", "persistentVolumeClaim": {"claimName": "models"}} in pod["volumes"]
    assert not any(v["name"] == "infiniband" for v in pod["volumes"])
    assert pod["containers"][0]["resources"]["limits"] == {"nvidia.com/gpu": 1, "rdma/hca": 1}
    assert pod["containers"][0]["securityContext"] == {"capabilities": {"add": ["IPC_LOCK"]}}
    assert lws["metadata"]["namespace"] == service["metadata"]["namespace"] == "llm"
    assert service["spec"]["selector"] == {"leaderworkerset.sigs.k8s.io/name": export.name,
                                           "leaderworkerset.sigs.k8s.io/worker-index": "0"}
    assert lws["metadata"]["labels"]["spark-deploy.plan-hash"] == export.plan.plan_hash
    _validate(export.manifests)


@pytest.mark.parametrize("docker,k8s", [("10g", "10Gi"), ("16G", "16Gi"), ("16GB", "16Gi"), ("512m", "512Mi"),
                                        ("1073741824", "1Gi"), ("1000", "1000"), ("1536m", "1536Mi")])
def test_docker_sizes_become_exact_binary_quantities(docker, k8s):
    assert docker_size_quantity(docker) == k8s


def test_bad_names_a_negative_timeout_and_a_file_as_output_are_bad_input_and_nothing_is_written(tmp_path):
    recipe, inventory = _pinned(SHIPPED[0], tmp_path), _inventory(tmp_path)
    existing = tmp_path / "existing.yaml"
    existing.write_text("mine\n")
    done = _cli("export", "k8s", str(recipe), "-i", str(inventory), "--image-ref", DIGEST_REF, "-n", "Bad_NS!",
                "--hf-cache-claim", "../etc/x", "--secret-name", "UPPER", "--ready-timeout", "-5",
                "-o", str(existing))
    assert done.returncode == 2, done.stderr
    said = " ".join(done.stderr.split())
    for named in ("--namespace 'Bad_NS!' is not a DNS-1123 label", "--hf-cache-claim '../etc/x' is not a DNS-1123",
                  "--secret-name 'UPPER' is not a DNS-1123", "--ready-timeout -5 must be a positive number",
                  f"--output {existing} is a file", "nothing written"):
        assert named in said, (named, said)
    assert "Traceback" not in done.stderr and done.stdout == "" and existing.read_text() == "mine\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["existing.yaml", "inventory.yaml", recipe.name])
    done = _cli("export", "k8s", str(recipe), "-i", str(inventory), "--image-ref", DIGEST_REF,
                "--ready-timeout", "nan")
    assert done.returncode == 2 and "--ready-timeout nan must be a positive number" in done.stderr


def test_options_the_recipe_has_no_use_for_are_said_to_be_ignored(tmp_path):
    tcp = _inventory(tmp_path, edit=lambda inv: inv.update(interconnect={"profile": "tcp",
                                                                         "socket_ifname": "enp1s0f0np0"}))
    no_secrets = _pinned(SHIPPED[0], tmp_path, edit=lambda r: r.pop("secrets"))
    done = _cli("export", "k8s", str(no_secrets), "-i", str(tcp), "--image-ref", DIGEST_REF,
                "--secret-name", "hf", "--rdma-resource", "rdma/hca", "-o", str(tmp_path / "out"))
    assert done.returncode == 0, done.stderr
    said = " ".join(done.stderr.split())
    assert "warning: --secret-name hf was ignored: recipe" in said and "lists no secrets" in said
    assert "warning: --rdma-resource rdma/hca was ignored: the inventory's interconnect profile is tcp" in said
    written = (tmp_path / "out" / f"{YAML(typ='safe').load(no_secrets.read_text())['name']}.k8s.yaml").read_text()
    assert "rdma/hca" not in written
    done = _cli("export", "k8s", str(_pinned(SHIPPED[0], tmp_path)), "-i", str(_inventory(tmp_path)),
                "--image-ref", DIGEST_REF, "--secret-name", "hf", "--rdma-resource", "rdma/hca", "--json")
    assert done.returncode == 0 and cli_json.result(done.stdout)["warnings"] == [] and "ignored" not in done.stderr
