"""Facts that cannot change without a reboot, remembered on the controller per node and boot (issue 19).

The CUDA version the loaded driver offers is read from the full `nvidia-smi` report, the slower of the
GPU calls, and only a reboot (a new driver module) changes it. `up` remembers it in
$XDG_CACHE_HOME (else ~/.cache)/spark-deploy/boot-facts/CLUSTER/NODE.json with the node's address and
boot id (/proc/sys/kernel/random/boot_id: the kernel makes a new one at every boot). The node compares
the boot id itself, in the same round trip as every other fact: the same boot prints the remembered
text; anything else (a reboot, no entry, another address) runs the command. A fact prints the same
either way, so parsers and judges cannot tell. `preflight` and maintenance always look afresh.

Not remembered: the GPU name, driver and clocks come from the `--query-gpu` call that must run anyway
(the clocks are live), and the kernel's `uname -r` costs nothing to ask (the sim's `kernel` fault changes
it without a reboot, and `up` must still see that).
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .core import FactInput, Observed, fact

BOOT_ID = "/proc/sys/kernel/random/boot_id"

# Opens a per-boot fact's script: "$1" the remembered boot id, "$2" the remembered text, then the fact's
# own args. On the boot it was remembered on, the text is printed and nothing runs.
SAME_BOOT_SH = ('[ -n "$1" ] && [ "$1" = "$(cat ' + BOOT_ID + ' 2>/dev/null)" ] && { printf \'%s\\n\' "$2"; exit 0; }\n'
                'shift 2\n')


@fact("boot_id", f"cat {BOOT_ID}")
def parse_boot_id(stdout: str) -> str:
    value = stdout.strip()
    if len(value) != 36 or value.count("-") != 4:
        raise ValueError(f"not a boot id: {value!r}")
    return value


@dataclass
class BootEntry:
    """What one node's boot showed: valid while the node keeps this address and this boot id."""

    address: str
    boot_id: str
    values: dict[str, str] = field(default_factory=dict)


def remembered(given: FactInput | None, key: str) -> list[str]:
    """Pure: the two leading args of a per-boot fact ("$1" boot id, "$2" text), empty when nothing is
    remembered for this node's address (the node then runs the command)."""
    entry = given.boot if given is not None else None
    if entry is None or entry.address != given.node.address or key not in entry.values:
        return ["", ""]
    return [entry.boot_id, entry.values[key]]


def updated(entry: BootEntry | None, address: str, boot_id: str, values: dict[str, str]) -> BootEntry:
    """Pure: the entry after a gather that saw `boot_id`; another boot or address starts afresh."""
    if entry is None or entry.address != address or entry.boot_id != boot_id:
        return BootEntry(address, boot_id, dict(values))
    return BootEntry(address, boot_id, {**entry.values, **values})


def cache_file(cluster: str, node: str) -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "spark-deploy" / "boot-facts" / cluster / f"{node}.json"


def load(cluster: str, node: str) -> BootEntry | None:
    try:
        data = json.loads(cache_file(cluster, node).read_text())
        return BootEntry(str(data["address"]), str(data["boot_id"]), {str(k): str(v) for k, v in data["values"].items()})
    except (OSError, ValueError, KeyError, TypeError, AttributeError):
        return None  # absent or damaged: looked up afresh, and written again


def store(cluster: str, node: str, entry: BootEntry) -> None:
    path = cache_file(cluster, node)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        temp = path.with_suffix(f".tmp-{os.getpid()}")
        temp.write_text(json.dumps({"address": entry.address, "boot_id": entry.boot_id, "values": entry.values}))
        temp.replace(path)
    except OSError:
        pass  # a cache that cannot be written only costs the next run the commands


def seen_values(facts: dict[str, Observed]) -> dict[str, str]:
    """Pure: the per-boot texts a gather read (the driver's CUDA line)."""
    out: dict[str, str] = {}
    gpu = facts.get("gpu")
    if gpu is not None and gpu.ok:
        cuda = [line for line in gpu.raw.splitlines()[1:] if line.startswith("CUDA")]
        if cuda:
            out["gpu_cuda"] = cuda[0]
    return out


def remember(cluster: str, addresses: dict[str, str], per_node: dict[str, dict[str, Observed]],
             before: dict[str, BootEntry | None]) -> None:
    """Store what each node showed under the boot id it reported in the same gather."""
    for node, facts in per_node.items():
        boot = facts.get("boot_id")
        if boot is None or not boot.ok or node not in addresses:
            continue
        store(cluster, node, updated(before.get(node), addresses[node], boot.value, seen_values(facts)))
