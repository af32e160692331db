"""Image identity on each node: the ID and the ordered RootFS layer DiffIDs (both survive save/load).

RepoDigests are kept as provenance only: `docker load` drops them (field note 1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..transport.node import NodeConnection


@dataclass(frozen=True)
class ImageIdentity:
    id: str
    diff_ids: tuple[str, ...]
    repo_tags: tuple[str, ...]
    repo_digests: tuple[str, ...]

    def same_content(self, other: "ImageIdentity") -> bool:
        """Same image: equal IDs, or (across storage backends that disagree on .Id) equal layer DiffIDs."""
        return self.id == other.id or (bool(self.diff_ids) and self.diff_ids == other.diff_ids)

    def short(self) -> str:
        return f"{self.id[:19]} ({len(self.diff_ids)} layers, tags {', '.join(self.repo_tags) or 'none'})"


def inspect_image(conn: NodeConnection, ref: str) -> ImageIdentity | None:
    """Similar to `docker image inspect REF`; None when the node does not have it."""
    return inspect_images(conn, [ref])[0]


def inspect_images(conn: NodeConnection, refs: list[str]) -> list[ImageIdentity | None]:
    """`docker image inspect` of each ref in one round trip; None where the node does not have it."""
    script = ('for r in "$@"; do out=$(docker image inspect --format "{{json .}}" "$r" 2>&1) && echo "$out" && continue; '
              'case "$out" in *"No such"*|*"no such"*) echo null ;; *) echo "$out" >&2; exit 1 ;; esac; done')
    result = conn.run_script(script, *refs, timeout=30, check=True)
    return [_identity(json.loads(line)) for line in result.stdout.splitlines() if line.strip()]


def _identity(data: dict | None) -> ImageIdentity | None:
    if data is None:
        return None
    return ImageIdentity(
        id=data["Id"],
        diff_ids=tuple((data.get("RootFS") or {}).get("Layers") or ()),
        repo_tags=tuple(data.get("RepoTags") or ()),
        repo_digests=tuple(data.get("RepoDigests") or ()),
    )


def image_size(conn: NodeConnection, image_id: str) -> int:
    result = conn.run(["docker", "image", "inspect", "--format", "{{.Size}}", image_id], timeout=30, check=True)
    return int(result.stdout.strip() or 0)


def taggable(ref: str) -> bool:
    """A `name:tag` reference can be re-created with `docker tag`; a digest reference cannot."""
    return "@" not in ref
