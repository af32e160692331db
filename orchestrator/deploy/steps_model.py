"""`up --sync-model`: the model on every node before preflight judges it (off by default: it can be
hundreds of GB). The same blob copy as `spark-deploy model pull` (model/pull.py), from a node that holds the
snapshot; a download only when none does and the recipe names a commit."""

from __future__ import annotations

import re

from ..model.copy import CopyFailed
from ..model.download import DownloadFailed
from ..model.pull import holder, pull_on, sync_model
from ..runner.events import Phase
from ..runner.runner import StepFailed
from ..transport.group import GroupError
from ..transport.node import NodeError
from .context import UpContext
from .steps_prepare import NoUndo

_COMMIT = re.compile(r"^[0-9a-f]{40}$")


class SyncModel(NoUndo):
    """Nothing to undo: a blob lands only whole and verified, under its hash; the snapshot links to it then.
    An interrupted copy leaves `.incomplete` files, which the next run resumes (and preflight names)."""

    phase, detail = Phase.MODEL, "copy the model's missing or damaged blobs node to node over the fabric"

    def run(self, ctx: UpContext) -> None:
        dep, head = ctx.dep, ctx.dep.inventory.head
        repo, rev = dep.recipe.model.repo, dep.recipe.model.revision
        if repo.startswith("/"):
            ctx.events.note(f"model.repo {repo} is a local path: --sync-model has nothing to copy")
            return
        conns = {n.name: ctx.conn(n.name) for n in dep.inventory.ranked}
        try:
            found = holder(conns, dep.inventory, repo, rev, prefer=head)
            if found is not None:
                source, commit = found
                copies = sync_model(ctx.cluster, conns, dep.inventory, repo, commit, source, ctx.events,
                                    ref="" if _COMMIT.match(rev) else rev)
            elif _COMMIT.match(rev):
                result = pull_on(ctx.cluster, conns, dep.inventory, dep.recipe, ctx.events, source=head, revision=None)
                source, copies = result.source, result.copies
            else:
                raise StepFailed(self.phase, f"no node holds {repo}@{rev}: run `spark-deploy model pull "
                                 f"{dep.recipe_path} --revision {rev} -i {dep.inventory_path}` (it downloads once "
                                 "and writes the commit into the recipe)")
        except GroupError as exc:
            raise StepFailed(self.phase, str(exc), sorted(exc.failures)) from exc
        except (CopyFailed, DownloadFailed, NodeError) as exc:
            raise StepFailed(self.phase, str(exc), [exc.node]) from exc
        moved = sum(c.bytes for c in copies.values())
        ctx.events.note(f"{repo}@{rev} on every node ({moved} bytes copied from {source})")
