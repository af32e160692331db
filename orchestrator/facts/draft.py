"""A speculative draft token list and the model it drafts for (`mounts.extra` with `draft_vocab: true`), read
on the head: the list's count, largest id and sha256, the model's vocab_size and its tokenizer.json's sha256
at the recipe's revision; and the head's release records. preflight's checks_draft.py judges them (see there
why); `up` records both hashes with each release (`record`, `Release.tokenizer`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from ..checks.model_cache import RESOLVE_SH
from ..config.recipe import ExtraMount, Recipe
from ..releases.record import Release
from ..releases.store import READ, parse_copy, releases_dir
from ..transport.node import NodeConnection
from .core import FactInput, fact


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
