"""The baseline of a maintenance window: what every node looked like, and what served, before it.

Written as JSON to every node's state dir (store.py) so that the window survives the controller; it
holds names, versions and hashes only, never a secret value (the recipe text names secrets, never their
values).
"""

from __future__ import annotations

import json
import time
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

SCHEMA = 1
BOOT_SERVING = "comes back and matches the serving release"  # facts/boot.BootMatch.SERVING's text


def said(reason: str) -> str:
    """The reason as an audit line shows it."""
    return f"reason {reason!r}" if reason else "no reason given"


class WindowState(StrEnum):
    OPEN = "open"
    CLOSED = "closed"


class GpuSeen(BaseModel):
    model_config = ConfigDict(extra="forbid")
    name: str
    driver: str
    cuda: str
    clock: int | None  # MHz; None where nvidia-smi says [N/A]
    max_clock: int | None
    idle: bool = False  # nvidia-smi's clocks_event_reasons.gpu_idle: a low clock is normal then
    clocks_locked: bool = False  # clocks_event_reasons.applications_clocks_setting (`nvidia-smi -lgc`)

    @property
    def locked(self) -> bool:
        """The sm-clock check's rule: an application-clock lock, or below 95% of its max while not idle."""
        if self.clocks_locked:
            return True
        return (not self.idle and bool(self.max_clock) and self.clock is not None
                and self.clock < 0.95 * self.max_clock)

    def clock_text(self) -> str:
        """As the tables show it: "2418 of 2418 MHz", "[N/A]", with "(idle)" or "(locked...)"."""
        shown = "[N/A]" if self.clock is None else f"{self.clock} of {self.max_clock if self.max_clock else '?'} MHz"
        if self.clocks_locked:
            return f"{shown} (locked: application clocks set)"
        return shown + (" (locked)" if self.locked else " (idle)" if self.idle else "")


class ImageSeen(BaseModel):
    """The serving release's image on one node: present or not, and its layers (DiffIDs)."""

    model_config = ConfigDict(extra="forbid")
    id: str
    present: bool
    diff_ids: list[str] = Field(default_factory=list)


class ModelSeen(BaseModel):
    """repo@revision in the node's HF cache: the commit it resolves to and each file's blob and size."""

    model_config = ConfigDict(extra="forbid")
    commit: str = ""
    absent: str | None = None
    files: dict[str, str] = Field(default_factory=dict)  # path in the snapshot -> "blob size"


class BootEntry(BaseModel):
    """One thing that comes back on boot (facts/boot.BootItem), judged against the release
    that served at begin."""

    model_config = ConfigDict(extra="forbid")
    kind: str  # unit | container
    name: str
    starts: str
    plan_hash: str | None = None
    match: str  # facts/boot.BootMatch's text

    def key(self) -> str:
        return f"{self.kind} {self.name}"


class NodeFacts(BaseModel):
    """Every fact of one node; a fact that could not be read is None and its reason is in `errors`.

    The boot fields are None when the boot facts could not be read (or this version lacks them)."""

    model_config = ConfigDict(extra="forbid")
    node: str
    gpu: GpuSeen | None = None
    kernel: str | None = None
    os_release: str | None = None
    docker_version: str | None = None
    docker_driver: str | None = None
    mem_total: int | None = None  # bytes
    mem_available: int | None = None  # bytes, when read (not compared: it moves all the time)
    image: ImageSeen | None = None
    model: ModelSeen | None = None
    systemd: str | None = None  # "" = systemd runs the node; else why it does not (units then not judged)
    units_enabled: list[str] | None = None  # every enabled service/socket unit file
    restart_policies: list[str] | None = None  # "container: policy" for every container with one
    on_boot: list[BootEntry] | None = None  # what comes back on boot
    errors: dict[str, str] = Field(default_factory=dict)  # fact -> why it could not be read
    unreachable: str | None = None


class StoppedContainer(BaseModel):
    """A container `begin --stop` stopped and kept (as `up` keeps a replaced release's: never renamed)."""

    model_config = ConfigDict(extra="forbid")
    node: str
    id: str
    name: str  # the name it served under
    kept: str  # the name it is kept under until `end`: its own (windows opened before names carried the plan: renamed)


class Baseline(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA
    cluster: str
    recipe: str  # the recipe's name
    recipe_text: str  # what the facts were judged against (the serving release's recorded recipe, if one serves)
    reason: str = ""
    by: str
    command: list[str]
    opened_at: float
    updated_at: float
    release: int | None = None  # the release that served at begin (None: nothing served)
    plan_hash: str | None = None
    image_id: str | None = None
    preflight_ok: bool = True
    preflight_failed: list[str] = Field(default_factory=list)  # "check (node, node): value"
    preflight_skipped: list[str] = Field(default_factory=list)  # left out, and why
    nodes: dict[str, NodeFacts] = Field(default_factory=dict)
    stopped: list[StoppedContainer] = Field(default_factory=list)  # --stop: what `end` must bring back
    state: WindowState = WindowState.OPEN
    closed_at: float | None = None
    outcome: str | None = None  # how `end` closed it

    @property
    def was_stopped(self) -> bool:
        return bool(self.stopped)

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":")) + "\n"

    def touch(self, **changes) -> Baseline:
        return self.model_copy(update={**changes, "updated_at": time.time()})

    def describe(self) -> str:
        """One line naming the window: who opened it, when, why."""
        when = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(self.opened_at))
        served = f"release {self.release}" if self.release is not None else "nothing serving"
        why = f", reason {self.reason!r}" if self.reason else ""
        return f"window opened {when} by {self.by} ({self.recipe}, {served}{why})"
