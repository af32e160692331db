"""bench against the vLLM stand-in run LOCALLY (one process on 127.0.0.1, no simulated cluster).

`served` (module scope, integration tests only): the shared 2-node simulated cluster, lent to the module, serving the sim recipe.

`standin(spec_k=..., env={...})` starts orchestrator.sim.standin.local.LocalStandin (ready when its log
says "Application startup complete.", bounded; its `SIM truth:` line is parsed into .truth) and stops it
at the end of the test. Readiness is also checked on /health, with a bound.
"""

from __future__ import annotations

import subprocess
import time

import httpx
import pytest
from bench_helpers import SPARK_DEPLOY
from ruamel.yaml import YAML

from orchestrator.sim.standin.local import LocalStandin



def _healthy(url: str, bound_s: float = 10.0) -> None:
    deadline = time.monotonic() + bound_s
    while True:
        try:
            if httpx.get(url + "/health", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() >= deadline:
            raise RuntimeError(f"{url}/health not 200 within {bound_s:g} s")
        time.sleep(0.05)


@pytest.fixture
def standin():
    started: list[LocalStandin] = []

    def start(spec_k: int = 0, env: dict | None = None, extra: tuple[str, ...] = ()) -> LocalStandin:
        srv = LocalStandin(spec_k=spec_k, env={"SIM_SEED": "7", **(env or {})}, timeout=60, extra=extra)
        srv.start()
        started.append(srv)
        _healthy(srv.url)
        return srv

    yield start
    for srv in started:
        srv.stop()


@pytest.fixture(scope="module")
def served(shared_pair, request, tmp_path_factory):
    """The session's shared 2-node cluster, lent to this module, serving the sim recipe at
    SIM_DECODE_TPS 300 for all of its tests; the loan's reset clears it afterwards."""
    tmp_path = tmp_path_factory.mktemp("bench-recipe")
    with shared_pair.lend(request.module.__name__) as cluster:
        yaml = YAML()
        doc = yaml.load(cluster.recipe_path.read_text())
        doc["env"]["SIM_DECODE_TPS"] = "300"
        recipe = tmp_path / "recipe.yaml"
        with recipe.open("w") as fh:
            yaml.dump(doc, fh)
        up = subprocess.run([str(SPARK_DEPLOY), "up", str(recipe), "-i", str(cluster.inventory_path)],
                            capture_output=True, text=True, timeout=600)
        assert up.returncode == 0, up.stdout + up.stderr
        yield cluster, recipe
