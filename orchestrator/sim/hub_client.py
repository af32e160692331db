"""huggingface_hub for the stand-in vLLM image, as one zip on its python's path.

`model pull` downloads inside the recipe's pinned image (on a Spark, vLLM's, which carries huggingface_hub);
the stand-in image must carry it too, so the REAL client is what talks to the Hub stand-in from a node.
The client and its dependencies (pure Python; hf_xet's native part is left out: the stand-in Hub answers
plain HTTP) are taken from this venv (the `sim` extra) and zipped with fixed timestamps, so the image's
hash changes only when their bytes do. A zip: ~2 MB in every image copy instead of ~8 MB of sources.
"""

from __future__ import annotations

import functools
import importlib.metadata as md
import io
import re
import zipfile

ROOT_DIST = "huggingface_hub"
ZIP_IN_IMAGE = "usr/lib/python3/dist-packages/hub-client.zip"
PTH_IN_IMAGE = "usr/lib/python3/dist-packages/hub-client.pth"  # puts the zip on sys.path at startup


def _closure(name: str, seen: dict[str, md.Distribution]) -> None:
    from packaging.markers import default_environment  # huggingface_hub's own dependency
    from packaging.requirements import Requirement

    key = re.sub(r"[-_.]+", "-", name).lower()
    if key in seen:
        return
    try:
        dist = md.distribution(name)
    except md.PackageNotFoundError:
        return
    seen[key] = dist
    env = {**default_environment(), "extra": ""}
    for spec in dist.requires or []:
        req = Requirement(spec)
        if req.marker is None or req.marker.evaluate(env):
            _closure(req.name, seen)


@functools.lru_cache(maxsize=1)  # ~1 s of zipping: once per process (every image check asks)
def client_zip() -> bytes | None:
    """The zip (sources + each distribution's METADATA, which importlib.metadata reads), or None when
    huggingface_hub is not installed here."""
    seen: dict[str, md.Distribution] = {}
    try:
        md.distribution(ROOT_DIST)
    except md.PackageNotFoundError:
        return None
    _closure(ROOT_DIST, seen)
    if not seen:
        return None
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w", zipfile.ZIP_DEFLATED) as archive:
        for _, dist in sorted(seen.items()):
            for path in sorted(dist.files or [], key=str):
                name = str(path)
                if name.startswith("..") or "__pycache__" in name:
                    continue
                if not (name.endswith(".py") or name.endswith(".dist-info/METADATA")):
                    continue
                info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                archive.writestr(info, path.locate().read_bytes())
    return buf.getvalue()


def image_files() -> dict[str, tuple[bytes, int]]:
    """What the stand-in image gets: the zip and the .pth naming it (nothing without huggingface_hub)."""
    data = client_zip()
    if data is None:
        return {}
    return {ZIP_IN_IMAGE: (data, 0o644), PTH_IN_IMAGE: (("/" + ZIP_IN_IMAGE + "\n").encode(), 0o644)}
