"""Fakes at the Docker level for the decision-logic unit tests: inspect results, not shell strings.

* `deployment()` loads a real recipe/inventory pair (the bundled sim recipe, a two-node RoCE inventory)
  written from dicts, with edits applied, through the real loader.
* `container_inspect()` / `image_inspect()` build one element of `docker container inspect` /
  `docker image inspect --format '{{json .}}'`, shaped like output captured from a simulated node.
* `FakeNode` answers `run_script` / `run` with what a node's engine would print for the refs it is given
  (the arguments), never by matching the script text.
* `run_bash()` runs a node script in this machine's bash, as a node runs it; `HfCache` (the `hf_cache`
  fixture, tests/unit/conftest.py) is the sim's fake model, real safetensors headers and blobs, in a HF cache.
"""

from __future__ import annotations

import copy
import json
import secrets
import subprocess
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

from ruamel.yaml import YAML

from orchestrator.config.load import Deployment, load_deployment
from orchestrator.docker_cli.containers import Container, container_of
from orchestrator.render.plan import Plan
from orchestrator.render.spec import base_name, container_name
from orchestrator.sim import fake_model
from orchestrator.transport.node import NodeError, Result

SIM_RECIPE = Path(__file__).resolve().parents[2] / "orchestrator" / "sim" / "recipes" / "sim-tiny.yaml"
IMAGE_ID = "sha256:2cefb2197111b19abc52a8ba52c44f3b38a979eb2eca4cf576096bc64201281c"
OTHER_ID = "sha256:74ec6115ca8e0000000000000000000000000000000000000000000000000000"
LAYERS = ("sha256:15abdec564745886e58b75d5d2a3a641b63f56e3c51f2639e612d084bd6b35a0",
          "sha256:5df783df338c113337fa8c902964d7557ce51163dd157e09458e4b96dfc4b0af")

INVENTORY = {
    "cluster": "unit-pair",
    "head": "spark-1",
    "interconnect": {"profile": "roce", "hca": "rocep1s0f0", "gid_index": 3, "socket_ifname": "enp1s0f0np0"},
    "ssh": {"user": "spark", "port": 22, "key": "/home/spark/.ssh/id_ed25519",
            "known_hosts": "/home/spark/.ssh/known_hosts"},
    "nodes": [
        {"name": "spark-1", "address": "spark-1.local", "fabric_ip": "192.168.100.1", "gpus": 1,
         "jit_cache": "/var/cache/vllm-jit", "hf_cache": "/home/spark/.cache/huggingface"},
        {"name": "spark-2", "address": "spark-2.local", "fabric_ip": "192.168.100.2", "gpus": 1,
         "jit_cache": "/var/cache/vllm-jit", "hf_cache": "/home/spark/.cache/huggingface"},
    ],
}


def sim_recipe() -> dict:
    """The bundled sim recipe as plain data, with its image pinned."""
    data = json.loads(json.dumps(YAML(typ="safe").load(SIM_RECIPE.read_text())))
    data["image"]["id"] = IMAGE_ID
    return data


def _dump(data: dict, path: Path) -> Path:
    with path.open("w") as handle:
        YAML().dump(data, handle)
    return path


_COUNTER = {"n": 0}


def deployment(directory: Path, recipe: Callable[[dict], None] | None = None,
               inventory: Callable[[dict], None] | None = None) -> Deployment:
    """Load the base pair after applying the edits (functions that change the dicts in place)."""
    r, i = sim_recipe(), copy.deepcopy(INVENTORY)
    if recipe:
        recipe(r)
    if inventory:
        inventory(i)
    _COUNTER["n"] += 1
    n = _COUNTER["n"]
    return load_deployment(_dump(r, directory / f"recipe-{n}.yaml"), _dump(i, directory / f"inventory-{n}.yaml"))


# ---- containers --------------------------------------------------------------------------------
def container_inspect(name: str, labels: dict[str, str] | None, *, status: str = "running", exit_code: int = 0,
                      container_id: str | None = None, image: str = IMAGE_ID, args: list[str] | None = None,
                      started_at: str = "2026-12-01T09:53:57.66486584Z") -> dict:
    """One element of `docker container inspect`, with the fields captured from a simulated node."""
    return {
        "Id": container_id or secrets.token_hex(32),
        "Created": "2026-12-01T09:53:57.312Z",
        "Path": "vllm",
        "Args": args or ["serve", "sim/tiny-moe"],
        "State": {"Status": status, "Running": status == "running", "Paused": False,
                  "Restarting": status == "restarting", "OOMKilled": False, "Dead": False,
                  "Pid": 644 if status == "running" else 0, "ExitCode": exit_code, "Error": "",
                  "StartedAt": started_at,
                  "FinishedAt": "0001-01-01T00:00:00Z" if status == "running" else "2026-12-01T09:55:01.1Z"},
        "Image": image,
        "Name": f"/{name}",
        "RestartCount": 0,
        "Config": {"Hostname": "spark-1", "Image": image, "Entrypoint": ["vllm", "serve"],
                   "Labels": dict(labels or {})},
    }


def ours(plan: Plan, rank: int, *, plan_hash: str | None = None, status: str = "running",
         exit_code: int = 0, run: str = "20261201T095357Z-422264", name: str | None = None,
         started_at: str = "2026-12-01T09:53:57.66486584Z", **labels_changed) -> Container:
    """The container `up` started for `rank` of `plan` (or of another plan, with `plan_hash`), as inspected,
    named as `up` names it (`name`: as something else did, e.g. an older spark-deploy)."""
    launch = plan.ranks[rank]
    hashed = plan.plan_hash if plan_hash is None else plan_hash
    labels = replace(launch.labels, run=run, plan_hash=hashed, **labels_changed)
    name = name or (container_name(labels.recipe, rank, hashed) if hashed else base_name(labels.recipe, rank))
    return container_of(container_inspect(name, dict(labels.pairs()),
                                          status=status, exit_code=exit_code, started_at=started_at))


def foreign(name: str, status: str = "running") -> Container:
    """An operator's container holding our name, without our labels."""
    return container_of(container_inspect(name, {"maintainer": "ops"}, status=status, image=OTHER_ID))


# ---- images ------------------------------------------------------------------------------------
def image_inspect(image_id: str = IMAGE_ID, *, tags: tuple[str, ...] = ("vllm-sim:latest",),
                  layers: tuple[str, ...] = LAYERS) -> dict:
    """`docker image inspect --format '{{json .}}'` of one image (the fields survey reads, and some more)."""
    return {"Id": image_id, "RepoTags": list(tags), "RepoDigests": [], "Parent": "",
            "Created": "2026-12-01T09:51:06.13898958Z", "DockerVersion": "20.10.24+dfsg1",
            "Architecture": "amd64", "Os": "linux", "Size": 120090624,
            "RootFS": {"Type": "layers", "Layers": list(layers)}}


def run_bash(script: str, *args: str) -> str:
    """A node script run by this machine's bash the way run_script runs it on a node ("$1".. are `args`): its
    stdout; a non-zero exit fails the test with the script's stderr."""
    res = subprocess.run(["bash", "-c", script, "bash", *args], capture_output=True, text=True, timeout=30)
    assert res.returncode == 0, res.stderr
    return res.stdout


@dataclass(frozen=True)
class HfCache:
    """The sim's fake model written at `root` in the real HF cache layout (fake_model.write_hf_cache)."""

    root: Path
    meta: dict  # write_hf_cache's: revision, files (name -> blob, size), total_bytes

    @classmethod
    def write(cls, root: Path) -> HfCache:
        return cls(root, fake_model.write_hf_cache(root))

    @property
    def blobs(self) -> Path:
        return self.root / "hub" / fake_model.CACHE_DIR_NAME / "blobs"


@dataclass
class FakeNode:
    """A node's engine as far as inspect goes. `images` maps a ref or ID to its inspect data; `broken` makes
    every command fail as a dead engine does. `calls` records each (script-or-argv, args)."""

    name: str
    images: dict[str, dict] = field(default_factory=dict)
    broken: str | None = None
    calls: list[tuple] = field(default_factory=list)

    def run_script(self, script: str, *args: str, timeout: float | None = None, check: bool = False,
                   **_kw) -> Result:
        """What the image-inspect loop prints: one JSON line per ref, `null` where the engine has none."""
        self.calls.append((script, args))
        if self.broken:
            result = Result(self.name, ("sh", "-c", script, *args), 1, "", self.broken)
        else:
            out = "".join(json.dumps(self.images.get(ref)) + "\n" for ref in args)
            result = Result(self.name, ("sh", "-c", script, *args), 0, out, "")
        return result.check() if check else result

    def run(self, argv, timeout: float | None = None, check: bool = False, **_kw) -> Result:
        self.calls.append((tuple(argv), ()))
        raise NodeError(self.name, f"FakeNode has no answer for {argv[:3]}")
