"""What goes into each simulated-cluster image: package lists, files, entrypoint -- and the hashes that tag them.

`images.py` builds from these specs; nothing here touches Docker. Three kinds:

- ``node``          the proven node: PID 1 docker-init, `sim-entrypoint` starts dockerd and sshd.
- ``node-systemd``  the same packages + systemd, systemd-sysv, dbus; PID 1 is systemd (``sim-init`` execs it), dockerd
                    and sshd are systemd services (opt-in: ``SimCluster.up(init="systemd")``).
- ``vllm``          minbase + python3 + the vLLM stand-in (with the option table it shares with `validate`).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from . import hub_client, node_files, node_files_systemd, node_roce

SUITE = "bookworm"
REPO_PREFIX = "spark-deploy-sim"
LABEL = "spark-deploy.sim"
VLLM_REFERENCE_TAG = "vllm-sim:latest"
RECIPE_VERSION = "1"  # bump when the build procedure changes in a way the inputs don't show

_HERE = Path(__file__).resolve().parent
NODE_MEMORY = _HERE / "node_memory.py"  # the node's memory daemon, installed as sim-memory
PACKAGE_DIR = _HERE.parent  # orchestrator/: the image holds the stand-in at the same place in this package
STANDIN_DIR = _HERE / "standin"  # the vLLM stand-in: `python3 -m orchestrator.sim.standin` in the image too
VLLM_TABLE_DIR = PACKAGE_DIR / "vllm_table"  # vLLM's option table: the core package's, imported by the stand-in
SITE_IN_IMAGE = "usr/lib/python3/dist-packages"  # on the image python3's sys.path
PACKAGE_IN_IMAGE = f"{SITE_IN_IMAGE}/orchestrator"
STANDIN_IN_IMAGE = f"{PACKAGE_IN_IMAGE}/sim/standin"
VLLM_TABLE_IN_IMAGE = f"{PACKAGE_IN_IMAGE}/vllm_table"
TABLE_SKIP = frozenset({"gen_options.py"})  # builds the option table on the host; not needed in the image
# `vllm serve ...` in the image: the stand-in's own PID-1 supervisor runs the server as its child
VLLM_WRAPPER = '#!/bin/sh\nexec python3 -m orchestrator.sim.standin "$@"\n'

# iperf3: `fabric test` measures the fabric with it when a node has it (a Spark gets it from apt too)
NODE_PACKAGES = ("openssh-server", "docker.io", "python3", "iproute2", "procps", "ca-certificates", "earlyoom",
                 "sudo", "iperf3")
SYSTEMD_PACKAGES = NODE_PACKAGES + ("systemd", "systemd-sysv", "dbus")
VLLM_PACKAGES = ("python3",)

# removed from every rootfs before import (keeps images small, and no shared host keys)
STRIP = (
    "usr/share/doc", "usr/share/man", "usr/share/info", "usr/share/locale",
    "var/lib/apt/lists", "var/cache/apt", "var/cache/debconf/templates.dat-old",
)

# removed from the stand-in's rootfs too (globs): what a Python server never runs. Every image copy costs
# CPU in proportion to its bytes (docker save, the fabric, docker load), and the tests copy this image to
# and between nodes many times: 116 MB before, of which these were about a third.
VLLM_STRIP = (
    "usr/lib/*-linux-gnu/gconv", "usr/lib/*-linux-gnu/perl-base", "usr/share/perl5", "usr/bin/perl",
    "usr/bin/perl5.*", "usr/lib/apt", "usr/lib/*-linux-gnu/libapt-*", "usr/bin/apt*", "usr/lib/dpkg",
    "var/lib/dpkg/info", "usr/lib/python3.*/test", "usr/lib/python3.*/pydoc_data", "usr/lib/python3.*/ensurepip",
    "usr/lib/python3.*/idlelib", "usr/lib/python3.*/lib2to3", "usr/lib/python3.*/turtledemo",
    "usr/lib/python3.*/tkinter", "usr/lib/python3.*/**/*.opt-[12].pyc",
)

_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


class ImageBuildError(RuntimeError):
    """A simulated-cluster image could not be built."""


def sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


@dataclass(frozen=True)
class ImageSpec:
    kind: str
    packages: tuple[str, ...]
    # path in image -> (content, mode); a mode with S_IFLNK (node_files_systemd.SYMLINK) is a symlink to content
    files: dict[str, tuple[bytes, int]] = field(hash=False)
    entrypoint: tuple[str, ...]
    cmd: tuple[str, ...]
    env: dict[str, str] = field(hash=False)
    extra_tags: tuple[str, ...] = ()
    # dirs whose modules are byte-compiled in the image at build (checked-hash .pyc): every stand-in start
    # would otherwise compile them again (PYTHONDONTWRITEBYTECODE, and a container starts from the image)
    compile_dirs: tuple[str, ...] = ()
    strip: tuple[str, ...] = ()  # globs removed from the base rootfs besides STRIP


    @property
    def base_hash(self) -> str:
        doc = {"v": RECIPE_VERSION, "suite": SUITE, "variant": "minbase",
               "packages": sorted(self.packages), "strip": list(STRIP) + list(self.strip)}
        return sha(json.dumps(doc, sort_keys=True).encode())

    @property
    def final_hash(self) -> str:
        doc = {
            "base": self.base_hash,
            "files": {p: [sha(c), m] for p, (c, m) in sorted(self.files.items())},
            "entrypoint": list(self.entrypoint), "cmd": list(self.cmd), "env": self.env,
            **({"compile": list(self.compile_dirs)} if self.compile_dirs else {}),
        }
        return sha(json.dumps(doc, sort_keys=True).encode())

    @property
    def base_tag(self) -> str:
        return f"{REPO_PREFIX}/{self.kind}-base:{self.base_hash[:12]}"

    @property
    def tag(self) -> str:
        return f"{REPO_PREFIX}/{self.kind}:{self.final_hash[:12]}"


def vllm_sim_source() -> Path:
    """The vLLM stand-in package baked into the vllm image (override: SPARK_DEPLOY_SIM_VLLM_SIM=DIR)."""
    override = os.environ.get("SPARK_DEPLOY_SIM_VLLM_SIM")
    path = Path(override) if override else STANDIN_DIR
    if not (path / "__main__.py").is_file():
        raise ImageBuildError(f"vLLM stand-in package not found at {path} (no __main__.py)")
    return path


def _modules(source: Path, dest: str, skip: frozenset[str] = frozenset()) -> dict[str, tuple[bytes, int]]:
    return {f"{dest}/{py.name}": (py.read_bytes(), 0o644)
            for py in sorted(source.glob("*.py")) if py.name not in skip}


def standin_files() -> dict[str, tuple[bytes, int]]:
    """The stand-in and what it imports, at their places in this package: one option table for `validate`
    and the stand-in (vllm_table/), so the stand-in's parser cannot drift from the one `validate` judges by."""
    return {
        f"{PACKAGE_IN_IMAGE}/__init__.py": ((PACKAGE_DIR / "__init__.py").read_bytes(), 0o644),
        f"{PACKAGE_IN_IMAGE}/sim/__init__.py": ((_HERE / "__init__.py").read_bytes(), 0o644),
        **_modules(VLLM_TABLE_DIR, VLLM_TABLE_IN_IMAGE, TABLE_SKIP),
        **_modules(vllm_sim_source(), STANDIN_IN_IMAGE),
    }


def _node_files() -> dict[str, tuple[bytes, int]]:
    """The stubs and helpers both node kinds carry."""
    return {
        "usr/local/bin/nvidia-smi": (node_files.NVIDIA_SMI.encode(), 0o755),
        "usr/local/bin/nvidia-container-runtime-hook": (node_roce.NVIDIA_HOOK.encode(), 0o755),
        "etc/sim-gpu.json": (node_files.GPU_JSON.encode(), 0o644),
        "etc/ssh/sshd_config.d/spark-deploy-sim.conf": (node_files.SSHD_CONFIG.encode(), 0o644),
        "usr/local/sbin/sim-service": (node_files.SIM_SERVICE.encode(), 0o755),
        "usr/local/sbin/sim-boot": (node_files.SIM_BOOT.encode(), 0o755),
        "usr/local/sbin/sim-roce": (node_roce.SIM_ROCE.encode(), 0o755),
        "usr/local/lib/sim-ib-hook": (node_roce.IB_HOOK.encode(), 0o755),
        "usr/local/sbin/sim-runc": (node_roce.SIM_RUNC.encode(), 0o755),
        "usr/local/lib/sim-runc-memlock": (node_roce.RUNC_MEMLOCK.encode(), 0o755),
        "etc/docker/daemon.json": (node_roce.DAEMON_JSON.encode(), 0o644),
        "usr/local/sbin/sim-memory": (NODE_MEMORY.read_bytes(), 0o755),
    }


def node_spec() -> ImageSpec:
    return ImageSpec(
        kind="node",
        packages=NODE_PACKAGES,
        files={**_node_files(),
               "usr/local/sbin/sim-entrypoint": (node_files.ENTRYPOINT.encode(), 0o755)},
        entrypoint=("/usr/local/sbin/sim-entrypoint",),
        cmd=(),
        env={"PATH": _PATH, "LANG": "C.UTF-8"},
    )


def node_systemd_spec() -> ImageSpec:
    return ImageSpec(
        kind="node-systemd",
        packages=SYSTEMD_PACKAGES,
        files={**_node_files(), **node_files_systemd.files()},
        entrypoint=("/usr/local/sbin/sim-init",),  # then exec /lib/systemd/systemd
        cmd=(),
        env={"PATH": _PATH, "LANG": "C.UTF-8", "container": "docker"},
    )  # its containers are created with StopSignal SIGRTMIN+3 (`docker commit` cannot set STOPSIGNAL)


def vllm_spec() -> ImageSpec:
    return ImageSpec(
        kind="vllm",
        packages=VLLM_PACKAGES,
        strip=VLLM_STRIP,
        files={
            **standin_files(),
            **hub_client.image_files(),  # huggingface_hub: `model pull` downloads inside the pinned image
            "usr/local/bin/vllm": (VLLM_WRAPPER.encode(), 0o755),
        },
        entrypoint=("vllm", "serve"),
        cmd=(),
        env={"PATH": _PATH, "LANG": "C.UTF-8", "PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1"},
        extra_tags=(VLLM_REFERENCE_TAG,),
        compile_dirs=("/" + PACKAGE_IN_IMAGE,),
    )
