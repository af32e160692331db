"""A speculative draft token list against the model it drafts for (`mounts.extra` with `draft_vocab: true`).

A draft list is token ids. An id at or beyond the model's vocab_size makes vLLM index past its embedding;
and a new tokenizer under an unchanged list makes every id name another token: answers stay correct (the
target model verifies every draft) while acceptance, and so speed, collapses silently. So the head reads
the list (count, largest id, sha256), the model's config.json vocab_size and the sha256 of its
tokenizer.json at the recipe's revision; `up` records both hashes with each release (`Release.tokenizer`),
and `draft-vocab` fails when the tokenizer differs from the last release that served this recipe while
the list's bytes are the same.
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..checks.model_cache import RESOLVE_SH
from ..config.load import Deployment
from ..config.recipe import ExtraMount, Recipe
from ..releases.record import Release
from ..releases.serving import ever_served
from ..releases.store import READ, parse_copy, releases_dir
from ..transport.node import NodeConnection
from ..facts.core import FactInput, Observed, fact
from ..checks.verdict import Cell, Scope, Status, Verdict
from .registry import check, missing

Seen = dict[str, dict[str, Observed]]


def draft_mount(recipe: Recipe) -> ExtraMount | None:
    return next((m for m in recipe.mounts.extra if m.draft_vocab), None)


# "$1" HF cache, "$2" repo, "$3" revision, "$4" the draft list on this node. Ids are separated by
# whitespace, commas or brackets (one per line, or a JSON list); anything else is named with its line.
DRAFT_SH = r'''[ $# -eq 4 ] || { echo '@none'; exit 0; }
cache=$1; repo=$2; rev=$3; draft=$4
''' + RESOLVE_SH + r'''
snap="$root/snapshots/${commit:-$rev}"
printf '@commit\t%s\n' "${commit:--}"
tok=-; [ -f "$snap/tokenizer.json" ] && tok=$(sha256sum -- "$snap/tokenizer.json") && tok=${tok%% *}
printf '@tokenizer\t%s\n' "$tok"
if [ -f "$draft" ]; then
  sha=$(sha256sum -- "$draft") || exit 1
  printf '@draft\t%s\t' "${sha%% *}"
  awk -F'[][,[:space:]]+' '{ for (i = 1; i <= NF; i++) if ($i != "") {
      if ($i !~ /^[0-9]+$/) { printf "bad %d %s\n", NR, substr($i, 1, 40); bad = 1; exit }
      n++; if ($i + 0 > m) m = $i + 0 } }
    END { if (!bad) printf "ids %d %d\n", n, (n ? m : -1) }' "$draft"
else
  printf '@draft-missing\n'
fi
if [ -f "$snap/config.json" ]; then echo '@config'; cat -- "$snap/config.json"; else echo '@no-config'; fi'''


@dataclass(frozen=True)
class DraftSeen:
    """What the head holds: the model's tokenizer and vocab_size, the draft list's hash and ids."""

    commit: str | None
    tokenizer_sha256: str | None
    vocab_size: int | None
    draft_sha256: str | None  # None: the list is not on the head
    count: int = 0
    max_id: int = -1
    bad: str | None = None  # the first thing that is not a token id, with its line


def _args(given: FactInput) -> list[str]:
    mount, recipe = draft_mount(given.dep.recipe), given.dep.recipe
    if mount is None or given.node.name != given.dep.inventory.head or recipe.model.repo.startswith("/"):
        return []
    return [given.node.hf_cache, recipe.model.repo, recipe.model.revision, mount.source]


def _vocab_size(config: dict) -> int | None:
    for cfg in (config, config.get("text_config") or {}):
        if isinstance(cfg, dict) and isinstance(cfg.get("vocab_size"), int):
            return cfg["vocab_size"]
    return None


@fact("draft_vocab", DRAFT_SH, args=_args)
def parse_draft(stdout: str) -> DraftSeen | None:
    """DRAFT_SH's sections -> DraftSeen (None: no draft list, or not the head)."""
    if stdout.strip() == "@none":
        return None
    head, sep, config = stdout.partition("\n@config\n")
    fields: dict[str, list[str]] = {}
    for line in head.splitlines():
        tag, _, rest = line.partition("\t")
        fields[tag] = rest.split("\t") if rest else []
    if "@commit" not in fields or "@tokenizer" not in fields:
        raise ValueError(f"unexpected output {stdout[:80]!r}")
    vocab = _vocab_size(json.loads(config)) if sep else None
    commit, tok = fields["@commit"][0], fields["@tokenizer"][0]
    seen = DraftSeen(None if commit == "-" else commit, None if tok == "-" else tok, vocab, None)
    if "@draft" not in fields:
        return seen
    sha, ids = fields["@draft"]
    words = ids.split(" ", 2)
    if words[0] == "bad":
        return DraftSeen(seen.commit, seen.tokenizer_sha256, vocab, sha, bad=f"line {words[1]}: {words[2]!r}")
    return DraftSeen(seen.commit, seen.tokenizer_sha256, vocab, sha, int(words[1]), int(words[2]))


def _history_args(given: FactInput) -> list[str]:
    if draft_mount(given.dep.recipe) is None or given.node.name != given.dep.inventory.head:
        return []
    return [releases_dir(given.dep.inventory, given.node.name)]


@fact("draft_history", "[ $# -eq 1 ] || { echo MISSING; exit 0; }\n" + READ, args=_history_args)
def parse_history(stdout: str) -> list[Release]:
    """The head's release records (its copy: `up` writes every record to every node), newest first."""
    return sorted(parse_copy("head", stdout).records.values(), key=lambda r: r.id, reverse=True)


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


def record(conn: NodeConnection, recipe: Recipe, hf_cache: str) -> dict | None:
    """What `up` records with a release (read on the head): the tokenizer's and the draft list's sha256."""
    mount = draft_mount(recipe)
    if mount is None or recipe.model.repo.startswith("/"):
        return None
    result = conn.run_script(DRAFT_SH, hf_cache, recipe.model.repo, recipe.model.revision, mount.source, timeout=60)
    if not result.ok:
        return {"error": (result.stderr or result.stdout).strip()[-200:]}
    got = parse_draft(result.stdout)
    return None if got is None else {"tokenizer_sha256": got.tokenizer_sha256, "draft_sha256": got.draft_sha256,
                                     "draft_vocab": mount.source, "commit": got.commit}
