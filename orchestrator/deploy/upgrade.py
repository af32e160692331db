"""`upgrade RECIPE --image REF`: a new image in one command, with what it changes for this recipe shown first.

Moving to a new image took four commands (pull on one node, `pin --replace`, `validate`, `up`) and showed
nothing of what the new image changes. Here, on one node: REF is made present (pulled when it is not
there), its ID pinned into a new recipe file (or in place, the old file kept beside it), and both images
are asked — in throwaway containers (`--rm --pull never --network none`, no GPU), before anything stops —
for their vLLM version, the new parser's view of every flag the recipe renders, and the hash of each
overlay target. A flag the new parser rejects, or an overlay whose base changed (or whose target is gone),
refuses the upgrade (exit 2) listing every item; the caller then runs `up`, which runs preflight first.

Defaults that changed for flags the recipe leaves unset (the two parsers' `(default: X)`, old image = what
serves this recipe on the node now, else the recipe's) are shown and recorded, not refused.
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass, field
from pathlib import Path

from ..config.edit import set_image
from ..config.load import Deployment, load_deployment, load_recipe
from ..docker_cli.containers import ours
from ..docker_cli.images import ImageIdentity, inspect_image
from ..checks.flags import judge_flags, rendered_flags
from ..checks.help_defaults import changed_defaults, parse_defaults
from ..checks.help_parse import canonical
from ..facts import vllm as _vllm_facts  # noqa: F401  (registers image_help, read through FACTS)
from ..facts.core import FACTS
from ..facts.overlays import PROBE_SH, parse_probe, probe_spec
from ..render.plan import build_plan
from ..transport.node import NodeConnection, NodeError, SSHTarget

# "$1" the image: the vLLM version its own `vllm --version` prints
VERSION_SH = 'docker run --rm --pull never --network none --entrypoint vllm "$1" --version 2>&1 | tail -n 1'


class UpgradeRefused(Exception):
    """Something to fix before the new image can run this recipe (exit 2): every item listed."""

    def __init__(self, items: list[str]):
        self.items = items
        super().__init__("; ".join(items))


@dataclass
class Upgrade:
    """What `upgrade` found: the node asked, the old and new image with their vLLM versions, the problems."""

    node: str
    recipe: Path  # the recipe file that now names the new image
    backup: Path | None  # the previous file, when written in place
    old_image: str | None
    new_image: str
    old_version: str | None
    new_version: str
    flags_checked: int = 0
    problems: list[str] = field(default_factory=list)
    defaults_changed: list[str] = field(default_factory=list)  # `--flag: A -> B`, flags the recipe leaves unset

    def record(self) -> dict:
        """What the release records (Release.upgrade)."""
        return {"from": {"image_id": self.old_image, "vllm_version": self.old_version},
                "to": {"image_id": self.new_image, "vllm_version": self.new_version},
                "defaults_changed": list(self.defaults_changed)}


def hold(conn: NodeConnection, ref: str) -> ImageIdentity:
    """REF's identity on the node, pulled there first when it is absent. Raises UpgradeRefused when the
    node can neither show nor pull it (saying how to load it)."""
    found = inspect_image(conn, ref)
    if found is not None:
        return found
    pulled = conn.run(["docker", "pull", ref], timeout=3600)
    found = inspect_image(conn, ref) if pulled.ok else None
    if found is None:
        why = (pulled.stderr or pulled.stdout).strip().splitlines()[-1:] or [f"exit {pulled.exit_code}"]
        raise UpgradeRefused([f"{conn.name} does not hold {ref} and could not pull it ({why[0]}): load it there "
                              f"(`docker load -i IMAGE.tar` on {conn.name}) and run upgrade again"])
    return found


def write_recipe(recipe: Path, ref: str, image_id: str, output: Path | None) -> tuple[Path, Path | None]:
    """The recipe naming the new image: `output` (a copy), or the recipe itself with the old file kept."""
    if output is not None:
        shutil.copyfile(recipe, output)
        set_image(output, ref, image_id)
        return output, None
    current, _ = load_recipe(recipe)
    if (current.image.ref, current.image.id) == (ref, image_id):
        return recipe, None  # already names it (a second run after fixes): nothing to keep
    backup = recipe.with_name(recipe.name + ".before-upgrade")
    n = 0
    while backup.exists():  # never overwrite an earlier one: it may be the only copy of the old recipe
        n += 1
        backup = recipe.with_name(f"{recipe.name}.before-upgrade.{n}")
    shutil.copyfile(recipe, backup)
    set_image(recipe, ref, image_id)
    return recipe, backup


def _version(conn: NodeConnection, image: str) -> str | None:
    result = conn.run_script(VERSION_SH, image, timeout=120)
    text = result.stdout.strip()
    return text if result.ok and text else None


def _serving_image(conn: NodeConnection, dep: Deployment) -> str | None:
    """The image this recipe's containers run on the node now (what the upgrade moves away from)."""
    running = [c for c in ours(conn, dep.recipe.name) if c.running and c.ours and c.ours.cluster == dep.inventory.cluster]
    return running[0].image if running else None


def _help(conn: NodeConnection, image: str) -> str:
    """The image's `vllm serve --help=all` (the vllm-flags check's own script), without its `@via` line."""
    result = conn.run_script(FACTS["image_help"].script, image, timeout=300)
    if not result.ok:
        raise NodeError(conn.name, f"`vllm serve --help=all` in {image} failed: "
                                   f"{(result.stderr or result.stdout).strip()[-300:]}")
    return result.stdout


def compare(conn: NodeConnection, old: Deployment, new: Deployment,
            old_image: str | None) -> tuple[list[str], int, list[str]]:
    """(problems, flags checked, defaults changed): every rendered flag against the new image's parser,
    every overlay's target in the new image against its base_sha256 (else the old image's file), and the
    defaults the two parsers print for the flags the recipe leaves unset."""
    problems: list[str] = []
    text = _help(conn, new.recipe.image.id)
    options = FACTS["image_help"].parse(text)["options"]
    flags = rendered_flags(build_plan(new))
    fails, _warns = judge_flags(flags, options)
    problems += [f"the new image's vLLM rejects {f}" for f in fails]
    defaults: list[str] = []
    if old_image and old_image != new.recipe.image.id:
        try:
            before = parse_defaults(_help(conn, old_image).partition("\n")[2])
        except NodeError as exc:
            defaults = [f"not compared: {exc}"]
        else:
            used = {canonical(flag, options) for flag, _ in flags}
            defaults = changed_defaults(before, parse_defaults(text.partition("\n")[2]), used)
    overlays = new.recipe.mounts.overlays
    if overlays:
        now = _hashes(conn, new.recipe.image.id, new)
        was: list = [None] * len(overlays)
        if old.recipe.image.id and old.recipe.image.id != new.recipe.image.id:
            try:
                was = _hashes(conn, old.recipe.image.id, old)
            except NodeError:  # the old image is not on this node: only base_sha256 can say what changed
                pass
        for o, got, prior in zip(overlays, now, was):
            base = o.base_sha256 or (prior.sha256 if prior is not None else None)
            if not got.exists:
                problems.append(f"overlay target {o.target} is not in the new image (renamed or removed upstream)")
            elif base is not None and got.sha256 != base:
                problems.append(f"the new image changed {o.target} under overlay {o.source}: port the patch again "
                                f"and update base_sha256 (new: {got.sha256}, base: {base})")
    return problems, len(flags), defaults


def _hashes(conn: NodeConnection, image: str, dep: Deployment) -> list:
    result = conn.run_script(PROBE_SH, image, probe_spec(dep.recipe.mounts.overlays, mounted=False), timeout=300)
    if not result.ok:
        raise NodeError(conn.name, f"hashing the overlay targets in {image} failed: "
                                   f"{(result.stderr or result.stdout).strip()[-300:]}")
    return parse_probe(result.stdout) or []


def prepare(recipe: Path, inventory: Path, ref: str, node: str | None = None,
            output: Path | None = None) -> tuple[Upgrade, Deployment]:
    """Everything before `up`: REF on the node, the recipe naming it, what it changes (Upgrade.problems:
    the items to fix, in the written recipe). Raises UpgradeRefused (REF cannot be had) or NodeError."""
    old = load_deployment(recipe, inventory)
    name = node or old.inventory.head
    conn = NodeConnection(SSHTarget.of(old.inventory, old.inventory.node(name)))
    try:
        conn.open()
        found = hold(conn, ref)
        serving = _serving_image(conn, old)
        old_image = serving or old.recipe.image.id
        written, backup = write_recipe(Path(recipe), ref, found.id, output)
        new = load_deployment(written, inventory)
        was = load_deployment(recipe if backup is None else backup, inventory)
        problems, checked, defaults = compare(conn, was, new, old_image)
        up = Upgrade(name, written, backup, old_image, found.id,
                     _version(conn, old_image) if old_image else None, _version(conn, found.id) or "unknown",
                     checked, problems, defaults)
    finally:
        conn.close()
    return up, new
