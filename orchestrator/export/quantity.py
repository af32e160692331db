"""Docker's size strings (`--shm-size 10g`) as Kubernetes quantities (`10Gi`).

Docker reads k/m/g (with or without a trailing b, any case, `i` too) as powers of 1024 (go-units RAMInBytes),
so `10g` is 10 GiB and the exact quantity is `10Gi`, never `10G` (a decimal gigabyte).
"""

from __future__ import annotations

import re

_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([kmgtp]?)(?:i?b)?\s*$", re.IGNORECASE)
_POWERS = {"": 0, "k": 1, "m": 2, "g": 3, "t": 4, "p": 5}
_SUFFIXES = ["", "Ki", "Mi", "Gi", "Ti", "Pi"]


def docker_size_bytes(text: str) -> int:
    found = _SIZE.match(text)
    if not found:
        raise ValueError(f"{text!r} is not a size Docker reads (e.g. 16g, 512m, 1073741824)")
    return int(float(found.group(1)) * 1024 ** _POWERS[found.group(2).lower()])


def quantity(size_bytes: int) -> str:
    """The largest binary suffix that states `size_bytes` exactly."""
    power = 0
    while power < len(_SUFFIXES) - 1 and size_bytes and size_bytes % 1024 ** (power + 1) == 0:
        power += 1
    return f"{size_bytes // 1024 ** power}{_SUFFIXES[power]}"


def docker_size_quantity(text: str) -> str:
    return quantity(docker_size_bytes(text))
