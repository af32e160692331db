#!/usr/bin/env python3
"""Issue 21, acceptance 3: image sync throughput against its cap, and what a layer-only copy saves.

    .venv/bin/python benchmarks/bench_image_sync.py                 # 3 runs, a ~600 MB image
    .venv/bin/python benchmarks/bench_image_sync.py --runs 5 --size-mb 2000

On one simulated 2-node cluster (real sshd and dockerd per node, the fabric network between them):

1. A = the stand-in image plus one layer of `--size-mb` MB of random bytes (built on spark-1), so that the
   fixed costs of a copy do not hide the rate.
2. Full path: `image_sync.copy_image` of A from spark-1 to an empty spark-2 (layer survey, archive
   written on spark-1, `| ssh | docker load` on spark-2, verification), against `docker load` alone of the
   `docker save` archive from a file on spark-2 (the cap: the copy can be no faster than the load at its
   end). Twice per run: logged in as root (the source reads its own layer store: layer_store.py) and as
   the sim's `spark` login (docker group, no store access: `docker save`). The three alternate; the image
   is removed from spark-2 before each. Target: full / load-only >= 0.9 (medians).
3. Layer path: B = A plus one 16 MB layer; copy_image of B onto spark-2 holding A, both ways: bytes moved
   and seconds.

Not in CI (minutes, and it fills the nodes' disks with the image several times). The cluster has a unique
name and is removed in a finally block. Prints one JSON object at the end.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

from orchestrator.docker_cli import image_sync as sync
from orchestrator.docker_cli import layers as lay
from orchestrator.docker_cli.images import inspect_image
from orchestrator.sim.cluster import SimCluster
from orchestrator.sim.images import VLLM_REFERENCE_TAG
from orchestrator.transport.group import Cluster
from orchestrator.config.load import load_deployment

sys.path.insert(0, str(Path(__file__).resolve().parent))
from node_cpu import nodes_cpu  # noqa: E402  (beside this file)

MB = 1_000_000
SSH_OPTS = "-o BatchMode=yes -o StrictHostKeyChecking=yes -o Compression=no"
DERIVE = ('set -e; head -c "$1" /dev/urandom > /tmp/bench-layer; c=$(docker create "$2"); '
          'docker cp /tmp/bench-layer "$c":/bench-layer-"$3"; docker commit "$c" "$3" >/dev/null; '
          'docker rm "$c" >/dev/null; rm -f /tmp/bench-layer; docker image inspect --format "{{.Id}}" "$3"')


def log(message: str) -> None:
    print(f"[bench-image-sync] {message}", file=sys.stderr, flush=True)


def timed(fn) -> tuple[float, object]:
    started = time.monotonic()
    out = fn()
    return time.monotonic() - started, out


def run(sim: SimCluster, runs: int, size_mb: int) -> dict:
    ids = [sim.container(n).id for n in (1, 2)]
    cpu: dict[str, list[float]] = {}  # what -> CPU seconds of both nodes together

    def costed(what: str, fn):
        before = nodes_cpu(ids)
        seconds, out = timed(fn)
        after = nodes_cpu(ids)
        if before is not None and after is not None:
            cpu.setdefault(what, []).append(after - before)
        return seconds, out

    dep = load_deployment(sim.recipe_path, sim.inventory_path)
    n2 = dep.inventory.node("spark-2")
    as_root = dep.inventory.model_copy(update={"ssh": dep.inventory.ssh.model_copy(update={"user": "root"})})
    cluster, root = Cluster(dep.inventory).open(), Cluster(as_root).open()
    try:
        src, dst = root["spark-1"], root["spark-2"]
        logins = {"store": (root["spark-1"], root["spark-2"], "root"),
                  "save": (cluster["spark-1"], cluster["spark-2"], dep.inventory.ssh.user)}
        log(f"building A (+{size_mb} MB) and B (A + 16 MB) on spark-1")
        a = src.run_script(DERIVE, str(size_mb * MB), VLLM_REFERENCE_TAG, "bench-sync:a", timeout=900, check=True).stdout.split()[-1]
        b = src.run_script(DERIVE, str(16 * MB), "bench-sync:a", "bench-sync:b", timeout=900, check=True).stdout.split()[-1]
        a_identity, b_identity = inspect_image(src, a), inspect_image(src, b)
        archive = int(src.run_script('docker save "$1" | wc -c', a, timeout=900, check=True).stdout)
        src.run_script(f'docker save "$1" | ssh {SSH_OPTS} "$2" "cat > /tmp/bench-image.tar"', a,
                       f"root@{n2.fabric_ip}", timeout=900, check=True)

        def clear() -> None:
            for image in (b, a):
                dst.run(["docker", "image", "rm", "--force", image], timeout=300)
            if inspect_image(dst, a) is not None:
                raise RuntimeError("spark-2 still holds A after docker rmi")

        def copy(image_id: str, identity, login: str) -> sync.Moved:
            source, target, user = logins[login]
            moved = sync.copy_image(source, target, image_id, identity, dst_host=n2.fabric_ip, dst_user=user,
                                    mode=sync.TransferMode.DIRECT)
            expected = {"store": (lay.Producer.STORE,), "save": (lay.Producer.SAVE, lay.Producer.FILTERED_SAVE)}
            if moved.producer not in expected[login] or moved.identity.id != image_id:
                raise RuntimeError(f"the {login} copy did not run as planned or did not verify: {moved}")
            return moved

        full: dict[str, list[float]] = {"store": [], "save": []}
        load: list[float] = []
        for i in range(runs):
            clear()
            seconds, _ = costed("load", lambda: dst.run_script("docker load < /tmp/bench-image.tar", timeout=900,
                                                               check=True))
            load.append(seconds)
            for login in full:
                clear()
                seconds, moved = costed(login, lambda: copy(a, a_identity, login))
                if moved.layers.archive is not sync.Archive.FULL:
                    raise RuntimeError(f"the full copy did not move the whole image: {moved}")
                full[login].append(seconds)
            log(f"run {i + 1}: load alone {load[-1]:.2f} s, full copy from the store {full['store'][-1]:.2f} s, "
                f"by docker save {full['save'][-1]:.2f} s")
        dst.run(["rm", "-f", "/tmp/bench-image.tar"], timeout=60)

        layer_runs = {}
        for login in full:  # spark-2 holds A (from the last full copy), B adds 16 MB
            seconds, moved = timed(lambda: copy(b, b_identity, login))
            if moved.layers.archive is not sync.Archive.LAYERS:
                raise RuntimeError(f"B onto A did not move only its missing layer: {moved}")
            layer_runs[login] = {"bytes": moved.bytes, "seconds": seconds, "left_out_bytes": moved.left_out}
            dst.run(["docker", "image", "rm", "--force", b], timeout=300)
        clear()
    finally:
        cluster.close()
        root.close()
    load_s = statistics.median(load)
    return {
        "archive_bytes": archive, "runs": runs, "load_only_seconds": load, "full_copy_seconds": full,
        "load_only_mb_s": archive / load_s / MB,
        "full_copy_mb_s": {k: archive / statistics.median(v) / MB for k, v in full.items()},
        "ratio_full_to_load": {k: load_s / statistics.median(v) for k, v in full.items()},
        "layers": layer_runs,
        "cpu_seconds_both_nodes": {k: statistics.median(v) for k, v in cpu.items()},
        "cpu_ratio_load_to_full": {k: statistics.median(cpu["load"]) / statistics.median(v) for k, v in cpu.items()
                                   if k != "load" and "load" in cpu},
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--size-mb", type=int, default=600, help="the random layer added to the stand-in image")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="bench-image-sync-"))
    os.environ.setdefault("SPARK_DEPLOY_SIM_HOME", str(work / "sim-home"))
    sim = SimCluster(f"bsync{os.getpid() % 100000}")
    try:
        log(f"sim cluster {sim.name}: 2 nodes, image on node 1")
        sim.up(nodes=2, load_image_on=(1,))
        results = run(sim, args.runs, args.size_mb)
    finally:
        sim.down()
    results["load_average_end"] = os.getloadavg()
    for login, ratio in results["ratio_full_to_load"].items():
        print(f"full path ({login}) {results['full_copy_mb_s'][login]:.0f} MB/s vs docker load alone "
              f"{results['load_only_mb_s']:.0f} MB/s: ratio {ratio:.2f} (target >= 0.9)", file=sys.stderr)
        layer = results["layers"][login]
        print(f"  B onto A ({login}): {layer['bytes']} bytes in {layer['seconds']:.2f} s", file=sys.stderr)
    for what, seconds in results["cpu_seconds_both_nodes"].items():
        print(f"CPU of both nodes, {what}: {seconds:.2f} s (median)", file=sys.stderr)
    print(json.dumps(results))
    return 0 if results["ratio_full_to_load"]["store"] >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
