"""A release: one `up` (or `rollback`) of one plan, as recorded on every node.

The record holds what it takes to deploy the same thing again (the recipe text with its pinned image ID,
the argv per rank) and what was seen (image layers, model revision per node, log checks, outcome). It
never holds a secret value: secrets are recorded by name only.
"""

from __future__ import annotations

import getpass
import hashlib
import json
import socket
import time
from enum import StrEnum

from pydantic import BaseModel, ConfigDict, Field

SCHEMA = 1


class ReleaseOutcome(StrEnum):
    DEPLOYING = "deploying"  # the `up` is running (or was killed: the next mutating command says so)
    SERVING = "serving"
    FAILED = "failed"  # in `failed_phase`; `restored` says what serves instead
    SUPERSEDED = "superseded"  # replaced by a newer `up`
    ROLLED_BACK = "rolled back"  # replaced by a `rollback` to an older release
    STOPPED = "stopped"  # `down` removed it
    ABANDONED = "abandoned"  # its `up` died without finishing (found by the next one, lock owner gone)


ENDED = {ReleaseOutcome.FAILED, ReleaseOutcome.SUPERSEDED, ReleaseOutcome.ROLLED_BACK, ReleaseOutcome.STOPPED,
         ReleaseOutcome.ABANDONED}


class RankRecord(BaseModel):
    model_config = ConfigDict(extra="forbid")
    rank: int
    node: str
    container: str
    argv: list[str]  # the full `docker run` argv, labels included


class ModelSeen(BaseModel):
    model_config = ConfigDict(extra="forbid")
    repo: str
    revision: str  # as the recipe asks
    per_node: dict[str, str] = Field(default_factory=dict)  # node -> commit the HF cache resolves it to ("" = absent)


class Release(BaseModel):
    model_config = ConfigDict(extra="forbid")
    schema_version: int = SCHEMA
    id: int
    cluster: str
    recipe: str  # its name
    recipe_text: str  # the recipe file as deployed (image.id pinned): deployable again as it was
    recipe_digest: str
    inventory_digest: str
    plan_hash: str
    run_id: str  # the `up` that made this release
    container_run: str  # the run label its containers carry (a rollback that restarts kept ones: theirs)
    image_id: str
    image_ref: str
    diff_ids: list[str] = Field(default_factory=list)
    ranks: list[RankRecord]
    model: ModelSeen
    secrets: list[str] = Field(default_factory=list)  # names only
    by: str
    command: list[str]
    started_at: float
    finished_at: float | None = None
    updated_at: float
    outcome: ReleaseOutcome = ReleaseOutcome.DEPLOYING
    failed_phase: str | None = None
    cause: str | None = None
    restored: int | None = None  # when this one failed: the release that serves again
    restore_failed: str | None = None  # ... or why restoring it failed
    rollback_of: int | None = None  # a rollback: the release it deploys again
    replaced: int | None = None  # the release this one replaced
    replaced_by: int | None = None
    log_checks: list[dict] = Field(default_factory=list)
    bench: dict | None = None
    kv_cache: dict | None = None  # model-fit's predicted KV tokens against the engine's logged ones (deploy/kv_report)
    engine: dict | None = None  # facts/fingerprint.py: what every rank resolved, and its digest
    after_ready: dict | None = None  # deploy/after_ready.py: MemAvailable, swap, the KV-cache lines per node
    acceptance: list[dict] = Field(default_factory=list)  # acceptance/: one result per check, what was seen
    gate: dict | None = None  # `up --gate` (bench/gate.py): the verdict, A's and B's medians, B/A and its interval
    tune: dict | None = None  # `tune` (bench/tune.py): the per-profile table, kept with the winner's release
    upgrade: dict | None = None  # `upgrade`: {"from", "to"}: each {"image_id", "vllm_version"}
    tokenizer: dict | None = None  # with a draft list: the sha256 of the head's tokenizer.json and of the list

    def outcome_text(self) -> str:
        """The outcome as a person reads it: "failed in ready (release 2 serves again)"."""
        text = str(self.outcome)
        if self.outcome is ReleaseOutcome.FAILED:
            text += f" in {self.failed_phase}" if self.failed_phase else ""
            if self.restored is not None:
                text += f" (release {self.restored} serves again)"
            elif self.restore_failed:
                text += " (restore FAILED)"
        elif self.replaced_by is not None and self.outcome in (ReleaseOutcome.SUPERSEDED, ReleaseOutcome.ROLLED_BACK):
            text += f" by {self.replaced_by}"
        return text

    def content_hash(self) -> str:
        """Identifies one version of the record: copies on two nodes agree when this agrees."""
        return hashlib.sha256(self.to_json().encode()).hexdigest()[:16]

    def to_json(self) -> str:
        return json.dumps(self.model_dump(mode="json"), sort_keys=True, indent=1)

    def touch(self, **changes) -> "Release":
        return self.model_copy(update={**changes, "updated_at": time.time()})


def who() -> str:
    """user@controller: who ran the command (recorded in releases, audit lines and the lock)."""
    try:
        user = getpass.getuser()
    except Exception:  # noqa: BLE001 - no passwd entry (containers): the uid still says who
        import os
        user = f"uid{os.getuid()}"
    return f"{user}@{socket.gethostname()}"
