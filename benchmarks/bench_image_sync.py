#!/usr/bin/env python3
"""Issue 21, acceptance 3: image sync throughput against its cap, and what a layer-only copy saves.

    .venv/bin/python benchmarks/bench_image_sync.py                 # 3 runs, a ~600 MB image
    .venv/bin/python benchmarks/bench_image_sync.py --runs 5 --size-mb 2000

On one simulated 2-node cluster (real sshd and dockerd per node, the fabric network between them):

1. A = the stand-in image plus one layer of `--size-mb` MB of random bytes (built on spark-1), so that the
   fixed costs of a copy do not hide the rate.
2. Full path: `image_sync.copy_image` of A from spark-1 to an empty spark-2 (layer survey, route choice,
   `docker save | ssh | docker load`, verification), against `docker load` alone of the same archive from a
   file on spark-2 (the cap: the copy can be no faster than the load at its end). The runs alternate;
   the image is removed from spark-2 before each. Target: full / load-only >= 0.9 (medians).
3. Layer path: B = A plus one 16 MB layer; copy_image of B onto spark-2 holding A: bytes moved and seconds,
   against a full copy of B.

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
from orchestrator.docker_cli.images import inspect_image
from orchestrator.sim.cluster import SimCluster
from orchestrator.sim.images import VLLM_REFERENCE_TAG
from orchestrator.transport.group import Cluster
from orchestrator.config.load import load_deployment

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
    dep = load_deployment(sim.recipe_path, sim.inventory_path)
    n2 = dep.inventory.node("spark-2")
    cluster = Cluster(dep.inventory).open()
    try:
        src, dst = cluster["spark-1"], cluster["spark-2"]
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

        def copy(image_id: str, identity) -> sync.Moved:
            return sync.copy_image(src, dst, image_id, identity, dst_host=n2.fabric_ip, dst_user="root",
                                   mode=sync.TransferMode.DIRECT)

        full, load = [], []
        for i in range(runs):
            clear()
            seconds, _ = timed(lambda: dst.run_script("docker load < /tmp/bench-image.tar", timeout=900, check=True))
            load.append(seconds)
            clear()
            seconds, moved = timed(lambda: copy(a, a_identity))
            if moved.layers.archive is not sync.Archive.FULL or moved.identity.id != a:
                raise RuntimeError(f"the full copy did not move and verify the whole image: {moved}")
            full.append(seconds)
            log(f"run {i + 1}: load alone {load[-1]:.2f} s, full copy {full[-1]:.2f} s ({moved.bytes} bytes)")
        dst.run(["rm", "-f", "/tmp/bench-image.tar"], timeout=60)

        # the layer path: spark-2 holds A (from the last full copy), B adds 16 MB
        seconds_layers, layers = timed(lambda: copy(b, b_identity))
        if layers.layers.archive is not sync.Archive.LAYERS or layers.identity.id != b:
            raise RuntimeError(f"B onto A did not move only its missing layer: {layers}")
        clear()
        seconds_b_full, b_full = timed(lambda: copy(b, b_identity))
        clear()
    finally:
        cluster.close()
    load_s, full_s = statistics.median(load), statistics.median(full)
    return {
        "archive_bytes": archive, "runs": runs,
        "load_only_seconds": load, "full_copy_seconds": full,
        "load_only_mb_s": archive / load_s / MB, "full_copy_mb_s": archive / full_s / MB,
        "ratio_full_to_load": load_s / full_s,
        "layers": {"bytes": layers.bytes, "seconds": seconds_layers, "left_out_bytes": layers.left_out,
                   "held": layers.layers.held, "of": layers.layers.layers},
        "b_full": {"bytes": b_full.bytes, "seconds": seconds_b_full},
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
    print(f"full path {results['full_copy_mb_s']:.0f} MB/s vs docker load alone {results['load_only_mb_s']:.0f} MB/s: "
          f"ratio {results['ratio_full_to_load']:.2f} (target >= 0.9)", file=sys.stderr)
    print(f"B onto A: {results['layers']['bytes']} bytes in {results['layers']['seconds']:.2f} s; "
          f"B onto nothing: {results['b_full']['bytes']} bytes in {results['b_full']['seconds']:.2f} s", file=sys.stderr)
    print(json.dumps(results))
    return 0 if results["ratio_full_to_load"] >= 0.9 else 1


if __name__ == "__main__":
    sys.exit(main())
