"""facts/engine_probe.py, the node-side program, run as the node runs it (`python3 -I -S`, a real
AF_UNIX socket and real HTTP) against a stand-in Docker Engine answering from captured JSON; and the
`@engine` entry's fallback to the CLI scripts in the same driver run, under real bash.

The answers go through each fact's own parser: what the engine path yields must be what the CLI's
captured output yields (tests/unit/samples).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from socketserver import ThreadingMixIn, UnixStreamServer
from urllib.parse import parse_qs, urlsplit

import pytest

import orchestrator.preflight  # noqa: F401  (registers every fact)
from orchestrator.facts import engine
from orchestrator.facts.core import DRIVER, FACTS, Source, gather_argv, parse_framed

SAMPLES = Path(__file__).parent / "samples"
IMAGE = "sha256:" + "a" * 64
RUNNING = "c" * 64


def _inspect_from_replaced_sample() -> dict:
    """The container the sample's CLI line describes, as the engine's inspect JSON holds it."""
    name, labels, args = (json.loads(p) for p in (SAMPLES / "replaced-sim-head.txt").read_text().split("\t"))
    return {"Id": RUNNING, "Name": name, "Config": {"Labels": labels, "Image": IMAGE}, "Args": args,
            "State": {"Status": "running", "ExitCode": 0, "OOMKilled": False, "StartedAt": "2026-12-02T03:04:30Z"},
            "Image": IMAGE}


class Engine(ThreadingMixIn, UnixStreamServer):
    daemon_threads = True

    def __init__(self, path: str, root: str):
        self.requests: list[str] = []
        info = json.loads((SAMPLES / "docker-info.json").read_text())
        info.pop("ClientInfo", None)  # the CLI's own part: the engine never sends it
        info["DockerRootDir"] = root
        image = {"Id": IMAGE, "RepoTags": ["vllm-sim:latest"], "RepoDigests": [], "Size": 116086809,
                 "RootFS": {"Type": "layers", "Layers": ["sha256:" + "1" * 64, "sha256:" + "2" * 64]}}
        self.routes = {"/info": info, "/version": {"Version": info["ServerVersion"]},
                       f"/images/{IMAGE}/json": image, "/images/vllm-sim:latest/json": image,
                       f"/containers/{RUNNING}/json": _inspect_from_replaced_sample(),
                       "/containers/sd-sim-tiny-r0/json": _inspect_from_replaced_sample()}  # by ID or by name
        super().__init__(path, Handler)


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server's name
        server: Engine = self.server  # type: ignore[assignment]
        server.requests.append(self.path)
        url = urlsplit(self.path)
        if url.path == "/containers/json":
            wanted = json.loads(parse_qs(url.query)["filters"][0])
            body, code = ([{"Id": RUNNING}] if wanted.get("label", {}).get("spark-deploy.recipe=sim-tiny") else []), 200
        elif url.path in server.routes:
            body, code = server.routes[url.path], 200
        elif url.path.startswith("/images/broken"):
            body, code = {"message": "layer does not exist"}, 500
        else:
            body, code = {"message": f"No such object: {url.path}"}, 404
        data = json.dumps(body).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def engine_socket(tmp_path):
    path = str(tmp_path / "docker.sock")
    server = Engine(path, str(tmp_path))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield path, server
    server.shutdown()
    server.server_close()


def probe(sock: str, *argv: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-I", "-S", "-c", engine.PROGRAM, *argv], capture_output=True, text=True,
                          env={**os.environ, "DOCKER_HOST": f"unix://{sock}"}, timeout=60)


def entry(name: str, op: str, *args: str) -> list[str]:
    return [name, op, str(len(args)), *args]


def test_each_fact_parses_to_what_the_cli_output_gives(engine_socket, tmp_path):
    sock, server = engine_socket
    filters = ["label=spark-deploy.managed=true", "label=spark-deploy.cluster=sim-hand",
               "label=spark-deploy.recipe=sim-tiny", "status=running"]
    got = probe(sock, *entry("docker_info", "info"), *entry("docker_version", "server_version"),
                *entry("image_disk", "image_disk", IMAGE), *entry("image_refs", "images", IMAGE, "vllm-sim:old"),
                *entry("recipe_or_named", "recipe_or_named", *filters[::2], "sd-sim-tiny-r0", "nobody"),
                *entry("replaced", "inspect_lines", *filters))
    assert got.returncode == 0 and got.stderr == "", got
    seen = parse_framed(got.stdout, FACTS)
    assert {n: o.source for n, o in seen.items()} == dict.fromkeys(
        ["docker_info", "docker_version", "image_disk", "image_refs", "recipe_or_named", "replaced"], Source.ENGINE_API)
    assert all(o.ok for o in seen.values()), seen
    assert seen["docker_info"].value == FACTS["docker_info"].parse((SAMPLES / "docker-info.json").read_text())
    assert (seen["docker_version"].value.code, seen["docker_version"].value.output) == (0, "20.10.24+dfsg1")
    stat = os.statvfs(tmp_path)  # what `df -PB1` prints as Available, the same moment give or take a write
    assert abs(seen["image_disk"].value["free"] - stat.f_bavail * stat.f_frsize) < 64 << 20
    assert seen["image_disk"].value["size"] == 116086809
    first, absent = seen["image_refs"].value
    assert first.id == IMAGE and len(first.diff_ids) == 2 and absent is None
    assert seen["replaced"].value == FACTS["replaced"].parse((SAMPLES / "replaced-sim-head.txt").read_text())
    # the label match and the plan's name find the same container (listed twice, as the CLI's inspect does);
    # the name nobody holds is left out
    assert [c.id for c in seen["recipe_or_named"].value] == [RUNNING, RUNNING]
    lists = [r for r in server.requests if r.startswith("/containers/json")]
    wanted = [json.loads(parse_qs(urlsplit(r).query)["filters"][0]) for r in lists]
    assert wanted[0] == {"label": {"spark-deploy.managed=true": True, "spark-deploy.recipe=sim-tiny": True}}
    assert "all=1" in lists[0] and "all=1" not in lists[1]
    assert wanted[1] == {"label": {f.partition("=")[2]: True for f in filters[:3]}, "status": {"running": True}}
    assert server.requests.count("/info") == 1  # asked once for both facts that read it


def test_an_engine_error_fails_that_fact_only(engine_socket):
    sock, _ = engine_socket
    got = probe(sock, *entry("image_refs", "images", "broken:1"), *entry("docker_version", "server_version"))
    assert got.returncode == 0
    seen = parse_framed(got.stdout, FACTS)
    assert not seen["image_refs"].ok and seen["image_refs"].error == "Error response from daemon: layer does not exist"
    assert seen["docker_version"].ok


def test_no_socket_says_why_and_prints_no_fact(tmp_path):
    got = probe(str(tmp_path / "absent.sock"), *entry("docker_info", "info"))
    assert got.returncode == engine.FALLBACK
    assert got.stdout.startswith("\x1eF @engine 3\n") and "absent.sock" in got.stdout
    assert parse_framed(got.stdout, FACTS) == {}


@pytest.mark.parametrize("python3, reason", [(True, "\x1eF @engine 3\n"), (False, "\x1eF @engine 127\nno python3")])
def test_without_the_engine_the_cli_scripts_run_in_the_same_driver_run(tmp_path, python3, reason):
    """The fallback under real bash: python3 cannot use the socket (or there is no python3), so the entry
    runs the facts' CLI scripts; the docker CLI (the one on this machine), pointed at the same absent socket,
    fails and says so."""
    found = {t: shutil.which(t) for t in ["bash", "mktemp", "cat", "rm", "uname", "docker"]}
    if python3:
        found["python3"] = sys.executable
    assert all(found.values()), f"needed here (as by the integration tests): {found}"
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for tool, path in found.items():
        (bin_dir / tool).symlink_to(path)
    given = None  # docker_info and docker_version take no input
    argv = gather_argv([FACTS["docker_info"], FACTS["docker_version"], FACTS["kernel"]], given)  # type: ignore[arg-type]
    env = {"PATH": str(bin_dir), "HOME": str(tmp_path), "DOCKER_HOST": f"unix://{tmp_path}/absent.sock"}
    got = subprocess.run([found["bash"], "-c", DRIVER, "bash", *argv], capture_output=True, text=True, env=env,
                         timeout=60)
    assert got.returncode == 0, got.stderr
    assert reason in got.stdout  # why it fell back, in the output
    seen = parse_framed(got.stdout, FACTS)
    assert {n: o.source for n, o in seen.items()} == dict.fromkeys(["kernel", "docker_info", "docker_version"],
                                                                    Source.SCRIPT)
    assert seen["kernel"].ok and not seen["docker_info"].ok
    assert "absent.sock" in seen["docker_info"].error  # docker's own message, from the CLI that ran
    assert seen["docker_version"].value.code != 0 and "absent.sock" in seen["docker_version"].value.output


def test_only_facts_with_an_op_ride_in_the_engine_entry():
    argv = gather_argv([FACTS["kernel"], FACTS["docker_info"]], None)  # type: ignore[arg-type]
    assert argv[:3] == ["kernel", FACTS["kernel"].script, "0"]
    assert argv[3:5] == [engine.ENGINE, engine.script(DRIVER)]
    assert gather_argv([FACTS["docker_info"]], None, engine_api=False) == [  # type: ignore[arg-type]
        "docker_info", FACTS["docker_info"].script, "0"]


def test_the_ops_facts_name_are_the_programs():
    from orchestrator.facts import engine_probe
    assert {str(op) for op in engine.Op} == set(engine_probe.OPS)
    assert {f.api for f in FACTS.values() if f.api} == set(engine.Op)
