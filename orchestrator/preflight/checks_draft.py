"""A speculative draft token list against the model it drafts for (`mounts.extra` with `draft_vocab: true`).

A draft list is token ids. An id at or beyond the model's vocab_size makes vLLM index past its embedding;
and a new tokenizer under an unchanged list makes every id name another token: answers stay correct (the
target model verifies every draft) while acceptance, and so speed, collapses silently. So the head reads
the list (count, largest id, sha256), the model's config.json vocab_size and the sha256 of its
tokenizer.json at the recipe's revision; `up` records both hashes with each release (`Release.tokenizer`),
and `draft-vocab` fails when the tokenizer differs from the last release that served this recipe while
the list's bytes are the same. The facts (the script, its parser, `record`) are in facts/draft.py.
"""

from __future__ import annotations

from ..config.load import Deployment
from ..config.recipe import ExtraMount
from ..releases.record import Release
from ..releases.serving import ever_served
from ..facts.core import Observed
from ..facts.draft import DraftSeen, draft_mount
from ..checks.verdict import Cell, Scope, Status, Verdict
from .registry import check, missing

Seen = dict[str, dict[str, Observed]]


def last_recorded(releases: list[Release], recipe: str) -> Release | None:
    """The newest release of this recipe that served and recorded its tokenizer."""
    return next((r for r in releases if r.recipe == recipe and r.tokenizer and ever_served(r)), None)


@check("draft-vocab", ("draft_vocab", "draft_history"), Scope.HEAD)
def draft_vocab(seen: Seen, dep: Deployment) -> Verdict:
    mount = draft_mount(dep.recipe)
    if mount is None:
        return Verdict("draft-vocab", Scope.HEAD, {n: Cell(Status.SKIP, "no mounts.extra with draft_vocab: true")
                                                   for n in seen})
    head = dep.inventory.head
    if head not in seen:
        return Verdict("draft-vocab", Scope.HEAD, {})
    broken = missing({head: seen[head]}, ("draft_vocab", "draft_history"))
    if head in broken:
        return Verdict("draft-vocab", Scope.HEAD, broken)
    got: DraftSeen | None = seen[head]["draft_vocab"].value
    if got is None:
        return Verdict("draft-vocab", Scope.HEAD, {head: Cell(Status.SKIP, "the model is a local path: no HF "
                                                                           "snapshot to read")})
    model = f"{dep.recipe.model.repo}@{dep.recipe.model.revision}"
    problems = _judge(got, mount, model, last_recorded(seen[head]["draft_history"].value, dep.recipe.name))
    if problems:
        return Verdict("draft-vocab", Scope.HEAD, {head: Cell(Status.FAIL, "; ".join(problems))},
                       f"{head}: " + "; ".join(problems))
    return Verdict("draft-vocab", Scope.HEAD, {head: Cell(Status.OK, (
        f"{got.count} draft ids, largest {got.max_id} < vocab_size {got.vocab_size}; tokenizer "
        f"{(got.tokenizer_sha256 or 'none')[:12]}"))})


def _judge(got: DraftSeen, mount: ExtraMount, model: str, last: Release | None) -> list[str]:
    src = mount.source
    if got.draft_sha256 is None:
        return [f"{src} is not on the head (extra-mounts says where it is missing)"]
    if got.bad:
        return [f"{src} holds something that is not a token id at {got.bad}"]
    problems = []
    if got.vocab_size is None:
        problems.append(f"no vocab_size in {model}'s config.json on the head: the draft ids cannot be checked")
    elif got.max_id >= got.vocab_size:
        problems.append(f"{src} holds token id {got.max_id}, beyond {model}'s vocabulary (vocab_size "
                        f"{got.vocab_size}): the list was made for another model or tokenizer")
    was = (last.tokenizer or {}) if last else {}
    if was and was.get("draft_sha256") == got.draft_sha256 and was.get("tokenizer_sha256") != got.tokenizer_sha256:
        problems.append(f"the tokenizer changed under an unchanged draft list {src} (sha256 {got.draft_sha256}): "
                        f"release {last.id} ran tokenizer.json {was.get('tokenizer_sha256') or 'none'}, {model} has "
                        f"{got.tokenizer_sha256 or 'none'}; every draft id now names another token: rebuild the "
                        "list for this tokenizer")
    return problems

