"""Image identity on each node: the ID and the ordered RootFS layer DiffIDs (both survive save/load).

RepoDigests are kept as provenance only: `docker load` drops them (field note 1).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..transport.node import NodeConnection, NodeError


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


# "$@" refs: one `{{json .}}` line per ref, `null` where the engine has none
INSPECT_IMAGES = ('for r in "$@"; do out=$(docker image inspect --format "{{json .}}" "$r" 2>&1) && echo "$out" && continue; '
            'case "$out" in *"No such"*|*"no such"*) echo null ;; *) echo "$out" >&2; exit 1 ;; esac; done')


def inspect_images(conn: NodeConnection, refs: list[str]) -> list[ImageIdentity | None]:
    """`docker image inspect` of each ref in one round trip; None where the node does not have it."""
    return parse_identities(conn.run_script(INSPECT_IMAGES, *refs, timeout=30, check=True).stdout)


def parse_identities(stdout: str) -> list[ImageIdentity | None]:
    """Pure: `INSPECT_IMAGES`'s lines (one `{{json .}}` or `null` per ref, in order) -> identities."""
    return [_identity(json.loads(line)) for line in stdout.splitlines() if line.strip()]


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


@dataclass(frozen=True)
class ImageSnapshot:
    """Every image ID on a node and what each `repo:tag` points to: taken before a sync, so that a failed
    or cancelled one can remove exactly what it added (and never anything that was there before)."""

    ids: frozenset[str]
    tags: dict[str, str]  # "repo:tag" -> image ID


def snapshot(conn: NodeConnection, *, shield: bool = False) -> ImageSnapshot:
    result = conn.run(["docker", "image", "ls", "--all", "--no-trunc", "--format", "{{.ID}} {{.Repository}}:{{.Tag}}"],
                      timeout=30, shield=shield)
    if not result.ok:
        raise NodeError(conn.name, "cannot list its images: " + docker_reason(result.stderr.splitlines(), result.exit_code))
    ids, tags = set(), {}
    for line in result.stdout.splitlines():
        image_id, _, ref = line.strip().partition(" ")
        if not image_id:
            continue
        ids.add(image_id)
        if ref and "<none>" not in ref:
            tags[ref] = image_id
    return ImageSnapshot(frozenset(ids), tags)


def restore(conn: NodeConnection, before: ImageSnapshot) -> list[str]:
    """Undo image changes since `before`: tags that are new are removed, tags that moved point back,
    images that are new are deleted. Runs shielded (also after a cancel). Returns what it changed."""
    now = snapshot(conn, shield=True)
    changed = []
    for ref, image_id in sorted(now.tags.items()):
        old = before.tags.get(ref)
        if old == image_id:
            continue
        if old is not None and old in now.ids:  # moved (e.g. --sync replaced what the reference meant)
            conn.run(["docker", "tag", old, ref], timeout=30, check=True, shield=True)
            changed.append(f"{ref} points to {old[:19]} again")
        elif image_id not in before.ids:
            continue  # on a new image: removed with it below
        elif any(i == image_id for r, i in before.tags.items() if r in now.tags):
            # an old image got a new tag; it keeps another tag, so removing this one keeps the image
            conn.run(["docker", "image", "rm", "--no-prune", ref], timeout=30, check=True, shield=True)
            changed.append(f"removed tag {ref}")
        # else: removing the tag would delete an image that was there before: it stays
    for image_id in sorted(now.ids - before.ids):
        conn.run(["docker", "image", "rm", "--force", image_id], timeout=60, check=True, shield=True)
        changed.append(f"removed image {image_id[:19]}")
    return changed


def docker_reason(lines: list[str], code: int) -> str:
    """docker's reason, short: the known ones said plainly, else its last line."""
    last = next((line.strip() for line in reversed(lines) if line.strip()), "")
    shown = last if len(last) <= 240 else last[:237] + "..."
    text = "\n".join(lines).lower()
    if "no space left on device" in text:
        return f"no space left on device (docker: {shown})"
    if "cannot connect to the docker daemon" in text or "is the docker daemon running" in text:
        return f"its Docker engine is not running (docker: {shown})"
    if "error during connect" in text:
        return f"its Docker engine stopped answering (docker: {shown})"
    return f"{shown} (exit {code})" if shown else f"exit {code}, nothing on stderr"
