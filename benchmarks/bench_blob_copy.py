#!/usr/bin/env python3
"""Issue 21 acceptance 2: `model pull`'s blob copy vs a raw `cat` over the same node-to-node path, one run.

    .venv/bin/python benchmarks/bench_blob_copy.py [--gb 2] [--shards 4] [--runs 2]

On a fresh 2-node simulated cluster: spark-1 gets a generated model (random shards, --gb in total) in its
HF cache; then, alternating, spark-2 receives (a) the same bytes by `ssh -c CIPHER spark-1 cat SHARDS > file`
(the raw path: same ssh, same fabric, same disk) once per cipher, and with one such ssh per shard at once
(RAWS): the fastest of them is the baseline (a fair one: the fastest raw transfer over that path, whatever
the copy itself uses); (b) the blob copy (model/pull.sync_model: `ssh tail -c | blob_keep`, which appends
to the .incomplete and hashes as it writes; rename, links) with 1, 2 and 4 streams; (c) one raw stream with
the copy's own cipher list written by the copy's own sink: the raw path plus verification. Prints MB/s, the
ratios per stream count (target: copy >= 0.9 x the baseline), the hasher spark-2 chose and the load average.
Not in CI: it moves GBs. The cluster is removed in a finally.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from orchestrator.checks.blob_hash import BLOB_DIGEST_SH, BLOB_KEEP_SH  # noqa: E402
from orchestrator.config.load import load_inventory  # noqa: E402
from orchestrator.model.pull import sync_model  # noqa: E402
from orchestrator.runner.events import Events  # noqa: E402
from orchestrator.sim.cluster import SimCluster  # noqa: E402
from orchestrator.sim.state import NODE_HF_CACHE, NODE_UID, NODE_USER  # noqa: E402
from orchestrator.transport.bulk_ssh import BULK_CIPHERS  # noqa: E402
from orchestrator.transport.group import Cluster  # noqa: E402
from node_cpu import nodes_cpu  # noqa: E402  (beside this file)

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

# On spark-2 as the login user: the raw path. "$1" the mode, "$2" the ssh cipher list, "$3" user@spark-1's
# fabric address, then the shard paths. Mode 0: one `ssh cat SHARDS > file`; p: one such ssh per shard, all at
# once (the raw path with as many streams as the copy); 1: one stream written by the copy's own sink, which
# hashes it on the way (checks/blob_hash.blob_keep): the raw path plus verification, the cap of the copy here.
RAW = BLOB_DIGEST_SH + "\n" + BLOB_KEEP_SH + r'''
mode=$1; cipher=$2; dest=$3; shift 3
SSH=(ssh -o BatchMode=yes -o Compression=no -c "$cipher" "$dest")
start=$(date +%s.%N)
case $mode in
  1) "${SSH[@]}" "cat $*" | blob_keep "$(printf %064d 0)" 0 /srv/hf-cache/raw.tmp > /dev/null ;;
  p) i=0; for f; do i=$((i + 1)); "${SSH[@]}" "cat $f" > /srv/hf-cache/raw.tmp.$i & done; wait ;;
  *) "${SSH[@]}" "cat $*" > /srv/hf-cache/raw.tmp ;;
esac
end=$(date +%s.%N)
total=0; for f in /srv/hf-cache/raw.tmp*; do total=$((total + $(stat -c %s "$f"))); done
echo "$total"; rm -f /srv/hf-cache/raw.tmp*
echo "$start $end"'''
HASHER = BLOB_DIGEST_SH + '\nprintf "%s\\n" "$BLOB_HASHER"'
# The raw baselines: OpenSSH's default cipher and the AES-GCM ones the copy prefers (transport/bulk_ssh.py), one
# stream; and the fastest cipher here with one stream per shard. The baseline is the fastest of them.
RAWS = {"cat, chacha20-poly1305": ("0", "chacha20-poly1305@openssh.com"),
        "cat, aes128-gcm": ("0", "aes128-gcm@openssh.com"),
        "cat, aes256-gcm": ("0", "aes256-gcm@openssh.com"),
        "cat, aes128-gcm, a stream per shard": ("p", "aes128-gcm@openssh.com")}


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
        raw: dict[str, list[float]] = {label: [] for label in RAWS}
        cpu: dict[str, list[float]] = {}  # what -> CPU seconds per GB, both nodes together
        ids = [cluster.container(n).id for n in (1, 2)]

        def costed(what: str, fn):
            before = nodes_cpu(ids)
            out = fn()
            after = nodes_cpu(ids)
            if before is not None and after is not None:
                cpu.setdefault(what, []).append((after - before) / (total / 1e9))
            return out

        hashed: list[float] = []
        copy: dict[int, list[float]] = {int(s): [] for s in args.streams.split(",")}
        group = Cluster(inv)
        try:
            group.open()
            conns = {c.name: c for c in group.nodes}
            hasher = conns["spark-2"].run(["bash", "-c", HASHER], check=True).stdout.strip()

            def cat(flag: str, cipher: str) -> float:
                out = conns["spark-2"].run(["bash", "-c", RAW, "bash", flag, cipher, dest, *paths], timeout=None,
                                           check=True)
                size, times = out.stdout.split("\n", 1)
                start, end = map(float, times.split())
                assert int(size) == total, f"raw cat moved {size} of {total} bytes"
                return total / (end - start) / 1e6

            for run in range(args.runs):
                for label, (mode, cipher) in RAWS.items():
                    raw[label].append(costed(label, lambda: cat(mode, cipher)))
                hashed.append(costed("sink", lambda: cat("1", ",".join(BULK_CIPHERS))))
                for streams in copy:
                    conns["spark-2"].run(["rm", "-rf", "--", ROOT], check=True)
                    t0 = time.monotonic()
                    result = costed(f"copy x{streams}", lambda: sync_model(group, conns, inv, REPO, COMMIT, "spark-1",
                                                                           Events(), streams=streams))
                    seconds = time.monotonic() - t0
                    assert result["spark-2"].bytes == total, result["spark-2"].bytes
                    copy[streams].append(total / seconds / 1e6)
                print(f"run {run + 1}: " + "; ".join(f"raw {label} {v[-1]:.0f} MB/s" for label, v in raw.items())
                      + f"; raw cat + hash {hashed[-1]:.0f} MB/s; "
                      + "; ".join(f"copy x{s} {v[-1]:.0f} MB/s" for s, v in copy.items())
                      + f"; load average {os.getloadavg()[0]:.1f}", flush=True)
        finally:
            group.close()
        medians = {label: statistics.median(v) for label, v in raw.items()}
        best = max(medians, key=medians.__getitem__)
        base = medians[best]
        single = max(v for label, v in medians.items() if RAWS[label][0] == "0")
        print(f"\n{args.gb:g} GB in {args.shards} shards, {args.runs} runs, medians; spark-2 hashes with {hasher}; "
              f"load average (1/5/15 min) {' '.join(f'{x:.1f}' for x in os.getloadavg())}:")
        floor = statistics.median(hashed)
        cost = {what: statistics.median(v) for what, v in cpu.items()}

        def of(what: str) -> str:
            return f"   CPU {cost[what]:5.2f} s/GB" if what in cost else ""

        for label, mb in medians.items():
            print(f"  raw {label:38} {mb:5.0f} MB/s{of(label)}" + ("   <- the baseline (the fastest raw)" if label == best
                                                                     else ""))
        print(f"  raw, one stream, the hashing sink          {floor:5.0f} MB/s{of('sink')}   (raw + verification)")
        for streams, values in copy.items():
            mb = statistics.median(values)
            print(f"  blob copy, {streams} stream(s)                     {mb:5.0f} MB/s{of(f'copy x{streams}')}   ratio "
                  f"{mb / base:.2f} vs the baseline (target >= 0.90), {mb / single:.2f} vs the fastest one-stream raw, "
                  f"{mb / floor:.2f} vs raw + hash")
        if best in cost:
            print("  CPU (both nodes) per GB, the baseline's over the copy's (the rate ratio a CPU-bound, otherwise idle "
                  "machine would give): " + ", ".join(f"x{s} {cost[best] / cost[f'copy x{s}']:.2f}" for s in copy
                                                       if f"copy x{s}" in cost))
        return 0
    finally:
        cluster.down()


if __name__ == "__main__":
    raise SystemExit(main())
