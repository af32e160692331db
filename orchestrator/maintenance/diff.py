"""The drift of a maintenance window: every fact of the baseline beside the same fact now, per node, what
changed, and what that means for the release that served. Pure: unit-tested without nodes.

A change maps to one typed Consequence; the window may be closed without `--yes` only when no change's
consequence blocks (something the release depends on: its image, its model, the driver its kernels and
flags were checked against, the host preflight judged, what comes back on boot).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from ..window.baseline import BOOT_SERVING, BootEntry, NodeFacts

GIB = 1 << 30


class Fact(StrEnum):
    REACHABLE = "reachable"
    GPU = "GPU"
    DRIVER = "driver"
    CUDA = "CUDA"
    SM_CLOCK = "SM clock"
    KERNEL = "kernel"
    OS = "OS"
    DOCKER = "docker engine"
    MEMORY = "memory (MemTotal)"
    IMAGE = "image"
    MODEL = "model"
    UNITS = "units enabled"
    RESTART = "restart policies"
    ON_BOOT = "comes back on boot"


class Consequence(StrEnum):
    SAFE = "safe to bring back"
    RESYNC_IMAGE = "must re-sync the image"
    RECHECK_FLAGS = "must re-check flags"
    REDOWNLOAD_MODEL = "must re-download the model"
    RESET_CLOCK = "must reset the SM clock"
    RERUN_PREFLIGHT = "must re-run preflight"
    BOOT_OTHER = "another stack comes back on boot"
    BOOT_CHANGED = "what comes back on boot changed"
    CANNOT_JUDGE = "cannot judge"
    NOTED = "noted"  # a change with no consequence for the release (a clock unlocked, a fact newly read)


BLOCKING = {Consequence.RESYNC_IMAGE, Consequence.RECHECK_FLAGS, Consequence.REDOWNLOAD_MODEL,
            Consequence.RESET_CLOCK, Consequence.RERUN_PREFLIGHT, Consequence.BOOT_OTHER, Consequence.CANNOT_JUDGE}

ADVICE = {
    Consequence.SAFE: "nothing the release depends on changed: `spark-deploy maintenance end` brings it back",
    Consequence.RESYNC_IMAGE: "the release's image is gone or differs on a node: load that exact image there "
                              "again (docker save | ssh NODE docker load), then `maintenance verify`",
    Consequence.RECHECK_FLAGS: "the driver, CUDA or image changed: re-run the vLLM flag check "
                               "(`spark-deploy preflight RECIPE --only vllm-flags --only gpu-parity`)",
    Consequence.REDOWNLOAD_MODEL: "the model's files differ from the baseline: download the recorded revision "
                                  "again (huggingface-cli download REPO --revision REV) on that node",
    Consequence.RESET_CLOCK: "the SM clock is locked below its maximum: `nvidia-smi -rgc`, or power-cycle the node",
    Consequence.RERUN_PREFLIGHT: "the host changed (kernel, OS, Docker, memory): `spark-deploy preflight RECIPE`",
    Consequence.BOOT_OTHER: "a unit or container of another stack comes back on boot (field note 9): "
                            "`spark-deploy boot enable RECIPE --yes` disables it",
    Consequence.BOOT_CHANGED: "what comes back on boot is not what it was: `spark-deploy boot status`",
    Consequence.CANNOT_JUDGE: "a node or a fact could not be read: fix it, then `maintenance verify` again",
    Consequence.NOTED: "no consequence for the release",
}


@dataclass(frozen=True)
class Row:
    """One fact on one node, before and after (the side-by-side table shows every row)."""

    node: str
    fact: Fact
    before: str
    after: str
    changed: bool


@dataclass(frozen=True)
class Change:
    node: str
    fact: Fact
    before: str
    after: str
    consequence: Consequence

    def text(self) -> str:
        return f"{self.fact} {self.before} → {self.after} on {self.node}"

    def as_dict(self) -> dict:
        return {"node": self.node, "fact": str(self.fact), "before": self.before, "after": self.after,
                "consequence": str(self.consequence), "blocks": self.consequence in BLOCKING}


@dataclass
class Drift:
    rows: list[Row] = field(default_factory=list)
    changes: list[Change] = field(default_factory=list)

    @property
    def blocking(self) -> list[Change]:
        return [c for c in self.changes if c.consequence in BLOCKING]

    @property
    def consequences(self) -> list[Consequence]:
        """What it means, most pressing first; SAFE when nothing blocks."""
        found = [c.consequence for c in self.changes]
        ordered = [c for c in Consequence if c in found and c in BLOCKING]
        if not ordered:
            ordered = [Consequence.SAFE] + [c for c in Consequence if c in found and c is not Consequence.SAFE]
        return ordered

    def as_dict(self) -> dict:
        return {"ok": not self.blocking, "consequences": [{"consequence": str(c), "blocks": c in BLOCKING,
                                                           "advice": ADVICE[c]} for c in self.consequences],
                "changes": [c.as_dict() for c in self.changes],
                "rows": [{"node": r.node, "fact": str(r.fact), "before": r.before, "after": r.after,
                          "changed": r.changed} for r in self.rows]}


# ---- how each fact is shown and judged -------------------------------------------------------------

def _clock(f: NodeFacts) -> str | None:
    if f.gpu is None:
        return None
    return f.gpu.clock_text()


def _image(f: NodeFacts) -> str | None:
    if f.image is None:
        return None
    if not f.image.present:
        return f"missing ({f.image.id.removeprefix('sha256:')[:12]})"
    return f"present ({f.image.id.removeprefix('sha256:')[:12]}, {len(f.image.diff_ids)} layers)"


def _model(f: NodeFacts) -> str | None:
    if f.model is None:
        return None
    if f.model.absent:
        return f"absent ({f.model.absent})"
    return f"{f.model.commit[:12]}, {len(f.model.files)} files"


def _memory(f: NodeFacts) -> str | None:
    return None if f.mem_total is None else f"{f.mem_total / GIB:.1f} GiB"


def _listed(items: list[str] | None) -> str | None:
    if items is None:
        return None
    return ", ".join(items) if items else "none"


def _on_boot(f: NodeFacts) -> str | None:
    if f.on_boot is None:
        return None
    return "; ".join(f"{e.key()} {e.match}" for e in f.on_boot) if f.on_boot else "nothing"


_SHOWN = {
    Fact.GPU: lambda f: f.gpu.name if f.gpu else None,
    Fact.DRIVER: lambda f: f.gpu.driver if f.gpu else None,
    Fact.CUDA: lambda f: f.gpu.cuda if f.gpu else None,
    Fact.SM_CLOCK: _clock,
    Fact.KERNEL: lambda f: f.kernel,
    Fact.OS: lambda f: f.os_release,
    Fact.DOCKER: lambda f: f"{f.docker_version} / {f.docker_driver}" if f.docker_version is not None else None,
    Fact.MEMORY: _memory,
    Fact.IMAGE: _image,
    Fact.MODEL: _model,
    Fact.UNITS: lambda f: _listed(f.units_enabled),
    Fact.RESTART: lambda f: _listed(f.restart_policies),
    Fact.ON_BOOT: _on_boot,
}

_ON_CHANGE = {
    Fact.GPU: Consequence.RECHECK_FLAGS, Fact.DRIVER: Consequence.RECHECK_FLAGS, Fact.CUDA: Consequence.RECHECK_FLAGS,
    Fact.KERNEL: Consequence.RERUN_PREFLIGHT, Fact.OS: Consequence.RERUN_PREFLIGHT,
    Fact.DOCKER: Consequence.RERUN_PREFLIGHT, Fact.MEMORY: Consequence.RERUN_PREFLIGHT,
    Fact.UNITS: Consequence.BOOT_CHANGED, Fact.RESTART: Consequence.BOOT_CHANGED,
}

# the baseline's NodeFacts field each fact is read from (for "could not be read" reasons)
_SOURCE = {Fact.GPU: "gpu", Fact.DRIVER: "gpu", Fact.CUDA: "gpu", Fact.SM_CLOCK: "gpu", Fact.KERNEL: "kernel",
           Fact.OS: "os_release", Fact.DOCKER: "docker_info", Fact.MEMORY: "meminfo",
           Fact.IMAGE: "maintenance_image", Fact.MODEL: "model_snapshot", Fact.UNITS: "boot_units",
           Fact.RESTART: "restart_policies", Fact.ON_BOOT: "restart_policies"}


def _unread(f: NodeFacts, fact: Fact) -> str:
    why = f.unreachable or f.errors.get(_SOURCE[fact])
    return f"not read ({why})" if why else "not gathered"


def _same(fact: Fact, before: NodeFacts, after: NodeFacts) -> bool:
    """Equal for what the release depends on (not every shown character: a clock reading moves)."""
    if fact is Fact.SM_CLOCK:
        return (before.gpu.locked, before.gpu.max_clock) == (after.gpu.locked, after.gpu.max_clock)
    if fact is Fact.IMAGE:
        return (before.image.present, before.image.diff_ids) == (after.image.present, after.image.diff_ids)
    if fact is Fact.MODEL:
        return (before.model.commit, before.model.absent, before.model.files) == \
            (after.model.commit, after.model.absent, after.model.files)
    if fact is Fact.ON_BOOT:
        return _boot_view(before.on_boot) == _boot_view(after.on_boot)
    return _SHOWN[fact](before) == _SHOWN[fact](after)


def _boot_view(entries: list[BootEntry]) -> dict[str, tuple[str, str | None]]:
    return {e.key(): (e.match, e.plan_hash) for e in entries}


def _consequence(fact: Fact, before: NodeFacts, after: NodeFacts) -> Consequence:
    if fact is Fact.SM_CLOCK:
        return Consequence.RESET_CLOCK if after.gpu.locked else Consequence.NOTED
    if fact is Fact.IMAGE:
        if not after.image.present:
            return Consequence.RESYNC_IMAGE
        return Consequence.NOTED if not before.image.present else Consequence.RESYNC_IMAGE
    if fact is Fact.MODEL:
        return Consequence.REDOWNLOAD_MODEL
    if fact is Fact.ON_BOOT:
        was = _boot_view(before.on_boot)
        other = [e for e in after.on_boot if e.match != BOOT_SERVING
                 and was.get(e.key()) != (e.match, e.plan_hash)]
        return Consequence.BOOT_OTHER if other else Consequence.BOOT_CHANGED
    return _ON_CHANGE[fact]


def _model_detail(before: NodeFacts, after: NodeFacts) -> tuple[str, str]:
    """The model row's values when only some files moved: name the first few files that differ."""
    b, a = before.model, after.model
    if b.absent or a.absent or b.commit != a.commit:
        return _model(before), _model(after)
    moved = sorted(p for p in set(b.files) | set(a.files) if b.files.get(p) != a.files.get(p))
    shown = moved[:3]
    more = f" (+{len(moved) - 3} more)" if len(moved) > 3 else ""
    return ("; ".join(f"{p} {b.files.get(p, 'absent')}" for p in shown) + more,
            "; ".join(f"{p} {a.files.get(p, 'absent')}" for p in shown) + more)


def compare(before: dict[str, NodeFacts], after: dict[str, NodeFacts]) -> Drift:
    """Every node of the baseline, every fact: shown side by side; a change carries its consequence."""
    drift = Drift()
    for node, was in before.items():
        now = after.get(node) or NodeFacts(node=node, unreachable="not in today's inventory")
        if now.unreachable:
            drift.rows.append(Row(node, Fact.REACHABLE, "yes", f"no: {now.unreachable}", True))
            drift.changes.append(Change(node, Fact.REACHABLE, "yes", f"unreachable ({now.unreachable})",
                                        Consequence.CANNOT_JUDGE))
            continue
        for fact in Fact:
            if fact is Fact.REACHABLE:
                continue
            b, a = _SHOWN[fact](was), _SHOWN[fact](now)
            if b is None and a is None:
                continue  # never gathered (e.g. no boot facts in this version, or no image pinned)
            if a is None:
                after_text = _unread(now, fact)
                drift.rows.append(Row(node, fact, b, after_text, True))
                drift.changes.append(Change(node, fact, b, after_text, Consequence.CANNOT_JUDGE))
                continue
            if b is None:
                before_text = _unread(was, fact)
                drift.rows.append(Row(node, fact, before_text, a, True))
                drift.changes.append(Change(node, fact, before_text, a, Consequence.NOTED))
                continue
            if _same(fact, was, now):
                drift.rows.append(Row(node, fact, b, a, False))
                continue
            if fact is Fact.MODEL:
                b, a = _model_detail(was, now)
            drift.rows.append(Row(node, fact, b, a, True))
            drift.changes.append(Change(node, fact, b, a, _consequence(fact, was, now)))
    return drift
