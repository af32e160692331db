"""bench against the vLLM stand-in run LOCALLY (one process on 127.0.0.1, no simulated cluster).

`standin(spec_k=..., env={...})` starts orchestrator.sim.standin.local.LocalStandin (ready when its log
says "Application startup complete.", bounded; its `SIM truth:` line is parsed into .truth) and stops it
at the end of the test. Readiness is also checked on /health, with a bound.
"""

from __future__ import annotations

import time

import httpx
import pytest

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

    def start(spec_k: int = 0, env: dict | None = None) -> LocalStandin:
        srv = LocalStandin(spec_k=spec_k, env={"SIM_SEED": "7", **(env or {})}, timeout=60)
        srv.start()
        started.append(srv)
        _healthy(srv.url)
        return srv

    yield start
    for srv in started:
        srv.stop()
