"""Session fixtures every test directory shares, and the rules the whole suite keeps (issue 17).

- ``docker_client``: the host engine; FAILS (never skips) when it is unreachable.
- ``sim_images``: session-scoped; builds the node and vllm-sim images, or reuses the cached tags.
- ``sim_home``: the controller-side state of test clusters goes to this session's temp dir.
- ``shared_pair`` / ``shared_systemd_pair``: one 2-node docker-init cluster and one 2-node systemd cluster
  per session (per xdist worker), made on first use and lent to one test or module at a time with a reset
  that proves itself (tests/shared_clusters.py). ``pair`` (tests/integration/conftest.py) is the loan.

Rules enforced:
- a test that asks for a Docker fixture must carry the ``integration`` mark (``-m "not integration"`` is
  then the real unit suite; a test that breaks this fails to collect, naming itself);
- timeouts bound a hang, not a slow machine: 60 s per unit test, 300 s per integration test (a test may
  set its own with ``@pytest.mark.timeout``);
- in CI (CI=true) a skip is a failure unless its reason starts "not on this host: " and names what the
  host lacks; scripts/test prints every skip's reason (-rs).
"""

from __future__ import annotations

import os
import random

import docker
import pytest
import xdist_plan

from shared_clusters import SharedCluster

HONEST_SKIP = "not on this host: "  # the only skip allowed in CI: `pytest.skip("not on this host: systemd-analyze")`
DOCKER_FIXTURES = {"docker_client", "sim_images", "sim_cluster_factory", "shared_pair", "shared_systemd_pair",
                   "pair", "conns", "clean", "served", "sysd", "systemd_pair"}
UNIT_TIMEOUT_S = 60
INTEGRATION_TIMEOUT_S = 300


def pytest_addoption(parser):
    parser.addoption("--shuffle-files", metavar="SEED", default=None,
                     help="run the test files in a random order drawn from SEED (tests within a file keep "
                          "their order): shows that no file depends on another having run first")


def pytest_collection_modifyitems(config, items):
    _order_files(items, config.getoption("--shuffle-files"))
    unmarked = []
    for item in items:
        integration = item.get_closest_marker("integration") is not None
        if not integration and DOCKER_FIXTURES & set(getattr(item, "fixturenames", ())):
            unmarked.append(item.nodeid)
        if item.get_closest_marker("timeout") is None:
            item.add_marker(pytest.mark.timeout(INTEGRATION_TIMEOUT_S if integration else UNIT_TIMEOUT_S))
    if unmarked:
        raise pytest.UsageError("tests that need Docker but are not marked integration "
                                "(add `pytestmark = pytest.mark.integration`): " + ", ".join(unmarked))


def _order_files(items: list, seed: str | None) -> None:
    """Files in one deterministic order, longest first (xdist hands out whole files in this order, so the
    long ones start early and the short ones fill in); or shuffled by file with --shuffle-files SEED."""
    files: dict[str, list] = {}
    for item in items:
        files.setdefault(item.nodeid.split("::", 1)[0], []).append(item)
    if seed is not None:
        order = sorted(files)
        random.Random(seed).shuffle(order)
    else:
        order = sorted(files, key=lambda f: (-xdist_plan.weight(f, len(files[f])), f))
    items[:] = [item for f in order for item in files[f]]


def pytest_xdist_make_scheduler(config, log):
    return xdist_plan.make_scheduler(config, log)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """In CI (CI=true) a skip that does not name what the host lacks is a failure: nothing passes by
    being left out."""
    outcome = yield
    report = outcome.get_result()
    if report.skipped and os.environ.get("CI") == "true" and not hasattr(report, "wasxfail"):
        reason = report.longrepr[2] if isinstance(report.longrepr, tuple) else str(report.longrepr)
        if HONEST_SKIP not in reason:
            report.outcome = "failed"
            report.longrepr = f"skipped in CI without naming what this host lacks ({HONEST_SKIP!r}...): {reason}"


@pytest.fixture(scope="session")
def docker_client() -> docker.DockerClient:
    try:
        client = docker.from_env(timeout=900)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure here means "no engine"
        pytest.fail(
            "integration tests need a Docker engine (start `dockerd`, or set DOCKER_HOST); "
            f"docker.from_env() failed: {exc}",
            pytrace=False,
        )
    return client


TEST_LOAD_SECONDS = "0.2"  # the stand-in's weight load where a test does not measure it (the demo keeps 2 s)


@pytest.fixture(scope="session")
def sim_home(tmp_path_factory) -> str:
    """State dirs of test clusters go to a per-session temp dir, not the user's ~/.local/state; every test
    cluster's recipe is the shipped one with a short load (a test that needs a long one sets its own) and
    one acceptance check."""
    from ruamel.yaml import YAML

    from orchestrator.sim.provision import DEFAULT_RECIPE

    path = tmp_path_factory.mktemp("sim-home")
    yaml = YAML()
    doc = yaml.load(DEFAULT_RECIPE.read_text())
    doc["env"]["SIM_LOAD_SECONDS"] = TEST_LOAD_SECONDS
    # one cheap acceptance check per `up` (~0.1 s, not the default set's ~1 s): test_acceptance.py runs the
    # default set on a variant without this key
    doc["acceptance"] = {"checks": ["logprobs-finite"]}
    template = path / "recipe-template.yaml"
    with template.open("w") as fh:
        yaml.dump(doc, fh)
    saved = {k: os.environ.get(k) for k in ("SPARK_DEPLOY_SIM_HOME", "SPARK_DEPLOY_SIM_RECIPE")}
    os.environ["SPARK_DEPLOY_SIM_HOME"] = str(path)
    os.environ["SPARK_DEPLOY_SIM_RECIPE"] = str(template)
    yield str(path)
    for key, value in saved.items():
        if value is None:
            os.environ.pop(key, None)
        else:
            os.environ[key] = value


@pytest.fixture(scope="session")
def sim_images(docker_client):
    from orchestrator.sim import images as sim_images_mod

    return sim_images_mod.ensure_images(docker_client)


@pytest.fixture(scope="session")
def shared_pair(docker_client, sim_images, sim_home):
    """The session's 2-node docker-init cluster, the stand-in image on both nodes (lend it: ``pair``)."""
    shared = SharedCluster(docker_client, "s", load_image_on=(1, 2))
    yield shared
    shared.down()


@pytest.fixture(scope="session")
def shared_systemd_pair(docker_client, sim_images, sim_home):
    """The session's 2-node systemd cluster (real systemd as PID 1; a reboot is a real boot)."""
    shared = SharedCluster(docker_client, "y", load_image_on=(1, 2), init="systemd")
    yield shared
    shared.down()
