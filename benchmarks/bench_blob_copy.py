#!/usr/bin/env python3
"""Issue 21 acceptance 2: `model pull`'s blob copy vs a raw `cat` over the same node-to-node path, one run.

    .venv/bin/python benchmarks/bench_blob_copy.py [--gb 2] [--shards 4] [--runs 2]

On a fresh 2-node simulated cluster: spark-1 gets a generated model (random shards, --gb in total) in its
HF cache; then, alternating, spark-2 receives (a) the same bytes by `ssh spark-1 cat SHARDS > file` (the
raw path: same ssh, same fabric, same disk) and (b) the blob copy (model/pull.sync_model: ssh tail -c |
dd >> .incomplete, the hash on arrival, rename, links) with 1, 2 and 4 streams; and (c) the raw path with
the bytes also through sha256sum, the cap of any verified copy on this CPU. Prints MB/s and the ratios
copy / raw (target >= 0.9) and copy / raw+hash per stream count. Not in CI: it moves GBs. The cluster is removed in a finally.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.config.load import load_inventory  # noqa: E402
from orchestrator.model.pull import sync_model  # noqa: E402
from orchestrator.runner.events import Events  # noqa: E402
from orchestrator.sim.cluster import SimCluster  # noqa: E402
from orchestrator.sim.state import NODE_HF_CACHE, NODE_UID, NODE_USER  # noqa: E402
from orchestrator.transport.group import Cluster  # noqa: E402

REPO = "sim/bench-big"
ROOT = f"{NODE_HF_CACHE}/hub/models--sim--bench-big"
COMMIT = "b" * 40

# "$1" root, "$2" commit, "$3" shards, "$4" MiB per shard: random shards named by their sha256, linked.
MAKE = r'''set -e
root=$1; commit=$2; n=$3; mib=$4
mkdir -p "$root/blobs" "$root/snapshots/$commit" "$root/refs"
for i in $(seq 1 "$n"); do
  head -c "$((mib * 1048576))" /dev/urandom > "$root/blobs/tmp"
  sha=$(sha256sum < "$root/blobs/tmp" | cut -d' ' -f1)
  mv "$root/blobs/tmp" "$root/blobs/$sha"
  ln -sfn "../../blobs/$sha" "$root/snapshots/$commit/model-$i.safetensors"
done
printf %s "$commit" > "$root/refs/main"'''

# On spark-2 as the login user: the raw path. "$1" hash too (1/0), "$2" user@spark-1's fabric address, then
# the shard paths. With "$1" = 1 the bytes also go through sha256sum: the floor of ANY verified copy here.
RAW = r'''hash=$1; dest=$2; shift 2
start=$(date +%s.%N)
if [ "$hash" = 1 ]; then
  ssh -o BatchMode=yes -o Compression=no "$dest" "cat $*" | tee >(sha256sum > /dev/null) > /srv/hf-cache/raw.tmp
else
  ssh -o BatchMode=yes -o Compression=no "$dest" "cat $*" > /srv/hf-cache/raw.tmp
fi
end=$(date +%s.%N)
stat -c %s /srv/hf-cache/raw.tmp; rm -f /srv/hf-cache/raw.tmp
echo "$start $end"'''


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gb", type=float, default=2.0)
    ap.add_argument("--shards", type=int, default=4)
    ap.add_argument("--runs", type=int, default=2)
    ap.add_argument("--streams", default="1,2,4")
    args = ap.parse_args()
    mib = int(args.gb * 1024 / args.shards)
    cluster = SimCluster(f"bench-blob-{os.getpid()}")
    try:
        cluster.up(2, (1,))
        cluster.exec(1, ["bash", "-c", MAKE, "bash", ROOT, COMMIT, str(args.shards), str(mib)])
        cluster.exec(1, ["chown", "-R", f"{NODE_UID}:{NODE_UID}", ROOT])
        shards = cluster.exec(1, ["bash", "-c", f'ls {ROOT}/blobs/']).stdout.split()
        total = mib * 1048576 * args.shards
        inv, _ = load_inventory(cluster.inventory_path)
        src = inv.node("spark-1")
        dest = f"{NODE_USER}@{src.fabric_ip}"
        paths = [f"{ROOT}/blobs/{s}" for s in shards]
        raw, hashed, copy = [], [], {int(s): [] for s in args.streams.split(",")}
        group = Cluster(inv)
        try:
            group.open()
            conns = {c.name: c for c in group.nodes}
            for run in range(args.runs):
                for flag, into in (("0", raw), ("1", hashed)):
                    out = conns["spark-2"].run(["bash", "-c", RAW, "bash", flag, dest, *paths], timeout=None,
                                               check=True)
                    size, times = out.stdout.split("\n", 1)
                    start, end = map(float, times.split())
                    assert int(size) == total, f"raw cat moved {size} of {total} bytes"
                    into.append(total / (end - start) / 1e6)
                for streams in copy:
                    conns["spark-2"].run(["rm", "-rf", "--", ROOT], check=True)
                    t0 = time.monotonic()
                    result = sync_model(group, conns, inv, REPO, COMMIT, "spark-1", Events(), streams=streams)
                    seconds = time.monotonic() - t0
                    assert result["spark-2"].bytes == total, result["spark-2"].bytes
                    copy[streams].append(total / seconds / 1e6)
                print(f"run {run + 1}: raw cat {raw[-1]:.0f} MB/s; raw cat + sha256 {hashed[-1]:.0f} MB/s; "
                      + "; ".join(f"copy x{s} {v[-1]:.0f} MB/s" for s, v in copy.items()), flush=True)
        finally:
            group.close()
        base = statistics.median(raw)
        print(f"\n{args.gb:g} GB in {args.shards} shards, {args.runs} runs, medians:")
        floor = statistics.median(hashed)
        print(f"  raw `ssh cat > file`              {base:7.0f} MB/s")
        print(f"  raw, through sha256sum too        {floor:7.0f} MB/s   (the cap of any verified copy here)")
        for streams, values in copy.items():
            mb = statistics.median(values)
            print(f"  blob copy, {streams} stream(s)           {mb:7.0f} MB/s   ratio {mb / base:.2f} vs raw "
                  f"(target >= 0.90), {mb / floor:.2f} vs raw + hash")
        return 0
    finally:
        cluster.down()


if __name__ == "__main__":
    raise SystemExit(main())
