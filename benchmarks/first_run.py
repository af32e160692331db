#!/usr/bin/env python3
"""The README's first-run figure: what `spark-deploy demo` costs on a machine that has never built the
simulated cluster's images, measured without touching the images other runs use.

    .venv/bin/python benchmarks/first_run.py

(1) the build a first run does (both debootstraps in parallel, docker import, the final stage), into
throwaway tags and a private debootstrap directory (so packages come from the mirror, as on a fresh
machine), then those images are removed; (2) `spark-deploy demo` end to end with the images present (what
every later run costs), then `sim down`. Prints both, their sum (the first run), the date and the load
average before and after. Not in CI: it debootstraps two images.
"""

from __future__ import annotations

import dataclasses
import datetime
import os
import subprocess
import sys
import tempfile
import time

import docker
from rich.console import Console

from orchestrator.sim import images
from orchestrator.sim.images_spec import ImageSpec, node_spec, vllm_spec

THROWAWAY = "spark-deploy-sim-first-run"


class Throwaway(ImageSpec):
    """The real spec under tags no other run uses."""

    @property
    def base_tag(self) -> str:
        return f"{THROWAWAY}/{self.kind}-base:{os.getpid()}"

    @property
    def tag(self) -> str:
        return f"{THROWAWAY}/{self.kind}:{os.getpid()}"


def _throwaway(spec: ImageSpec) -> Throwaway:
    return Throwaway(**{f.name: getattr(spec, f.name) for f in dataclasses.fields(spec)})


def build_seconds(client: docker.DockerClient) -> float:
    specs = [_throwaway(node_spec()), _throwaway(vllm_spec())]
    with tempfile.TemporaryDirectory(prefix="first-run-") as cache:
        os.environ["SPARK_DEPLOY_SIM_CACHE"] = cache
        start = time.monotonic()
        try:
            images._build_missing(client, Console(stderr=True), specs, {})
            return time.monotonic() - start
        finally:
            for spec in specs:
                for ref in (spec.tag, spec.base_tag):
                    if images._get(client, ref) is not None:
                        client.images.remove(ref, force=True)


def demo_seconds() -> float:
    cli = [sys.executable, "-c", "from orchestrator.cli.main import run; run()"]
    name = f"firstrun{os.getpid()}"
    start = time.monotonic()
    try:
        subprocess.run([*cli, "demo", "--name", name], check=True, stdout=subprocess.DEVNULL)
        return time.monotonic() - start
    finally:
        subprocess.run([*cli, "sim", "down", "--name", name], check=False, stdout=subprocess.DEVNULL)


def main() -> None:
    client = docker.from_env(timeout=900)
    load_before = os.getloadavg()
    build = build_seconds(client)
    demo = demo_seconds()
    print(f"{datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
          f"load average before {load_before[0]:.1f}, after {os.getloadavg()[0]:.1f}")
    print(f"image build (first run only): {build:.0f} s")
    print(f"demo with the images present: {demo:.0f} s")
    print(f"first run: {build + demo:.0f} s")


if __name__ == "__main__":
    sys.exit(main())
