"""`draft-vocab` (issue 37): the draft list's ids against the model's vocab_size and its tokenizer against
the last release's. DRAFT_SH is run in real bash over an HF cache laid out as the hub writes it."""

from __future__ import annotations

import hashlib
import json
import subprocess
from pathlib import Path

import pytest
from fakes import deployment

from orchestrator.config.source import ConfigError
from orchestrator.facts import draft as fd
from orchestrator.preflight import checks_draft as cd
from orchestrator.facts.core import FactInput, Observed
from orchestrator.preflight.registry import Status
from orchestrator.releases.record import ModelSeen, Release, ReleaseOutcome
from orchestrator.render.plan import build_plan

REPO, COMMIT = "org/model", "c" * 40
TOKENIZER = b'{"model": {"vocab": {"a": 0}}}'


def hf_cache(root: Path, vocab_size: int = 1000, tokenizer: bytes | None = TOKENIZER) -> Path:
    model = root / "hub" / f"models--{REPO.replace('/', '--')}"
    snap = model / "snapshots" / COMMIT
    snap.mkdir(parents=True)
    (model / "refs").mkdir()
    (model / "refs" / "main").write_text(COMMIT)
    (snap / "config.json").write_text(json.dumps({"text_config": {"vocab_size": vocab_size}}))
    if tokenizer is not None:
        (snap / "tokenizer.json").write_bytes(tokenizer)
    return root


def run(cache: Path, draft: Path) -> fd.DraftSeen | None:
    out = subprocess.run(["bash", "-c", fd.DRAFT_SH, "fact", str(cache), REPO, "main", str(draft)],
                         capture_output=True, text=True, timeout=30, check=True)
    return fd.parse_draft(out.stdout)


@pytest.mark.parametrize(("text", "count", "largest"), [("5\n17\n3\n", 3, 17), ("[4, 9, 1]", 3, 9), ("", 0, -1)])
def test_the_script_reads_ids_hashes_and_vocab_size(tmp_path, text, count, largest):
    cache = hf_cache(tmp_path / "hf")
    draft = tmp_path / "draft.txt"
    draft.write_text(text)
    got = run(cache, draft)
    assert got == fd.DraftSeen(COMMIT, hashlib.sha256(TOKENIZER).hexdigest(), 1000,
                               hashlib.sha256(text.encode()).hexdigest(), count, largest)


def test_the_script_names_what_is_not_an_id_and_a_missing_list(tmp_path):
    cache = hf_cache(tmp_path / "hf", tokenizer=None)
    draft = tmp_path / "draft.txt"
    draft.write_text("1\n2\nhello\n")
    got = run(cache, draft)
    assert got.bad == "line 3: 'hello'" and got.tokenizer_sha256 is None
    missing = run(cache, tmp_path / "absent.txt")
    assert missing.draft_sha256 is None and missing.vocab_size == 1000


def _dep(tmp_path):
    return deployment(tmp_path, lambda r: r["mounts"].__setitem__("extra", [
        {"source": "/srv/draft.txt", "target": "/etc/draft.txt", "draft_vocab": True}]))


def _release(rid: int, recipe: str, tokenizer: dict | None, outcome=ReleaseOutcome.SUPERSEDED) -> Release:
    return Release(id=rid, cluster="c", recipe=recipe, recipe_text="", recipe_digest="d", inventory_digest="i",
                   plan_hash="p", run_id="r", container_run="r", image_id="sha256:" + "0" * 64, image_ref="x",
                   ranks=[], model=ModelSeen(repo=REPO, revision="main"), by="me", command=[], started_at=1.0,
                   updated_at=1.0, outcome=outcome, tokenizer=tokenizer)


def _seen(got: fd.DraftSeen, history: list[Release]) -> dict:
    return {"spark-1": {"draft_vocab": Observed(value=got), "draft_history": Observed(value=history)}}


def test_an_id_beyond_the_vocabulary_fails_naming_both(tmp_path):
    dep = _dep(tmp_path)
    got = fd.DraftSeen(COMMIT, "t" * 64, 256, "d" * 64, 3, 300)
    verdict = cd.draft_vocab(_seen(got, []), dep)
    assert verdict.status is Status.FAIL
    assert ("spark-1: /srv/draft.txt holds token id 300, beyond sim/tiny-moe@" in verdict.fix
            and "(vocab_size 256)" in verdict.fix)
    ok = cd.draft_vocab(_seen(fd.DraftSeen(COMMIT, "t" * 64, 256, "d" * 64, 3, 255), []), dep)
    assert ok.status is Status.OK and "largest 255 < vocab_size 256" in ok.cells["spark-1"].value


def test_a_new_tokenizer_under_the_same_list_fails_naming_both_hashes(tmp_path):
    dep = _dep(tmp_path)
    old, new, draft = "a" * 64, "b" * 64, "d" * 64
    history = [_release(3, "other", {"tokenizer_sha256": new, "draft_sha256": draft}),
               _release(2, dep.recipe.name, {"tokenizer_sha256": old, "draft_sha256": draft}),
               _release(1, dep.recipe.name, {"tokenizer_sha256": new, "draft_sha256": draft})]
    verdict = cd.draft_vocab(_seen(fd.DraftSeen(COMMIT, new, 256, draft, 3, 10), history), dep)
    assert verdict.status is Status.FAIL
    assert f"release 2 ran tokenizer.json {old}" in verdict.fix and f"has {new}" in verdict.fix
    assert f"unchanged draft list /srv/draft.txt (sha256 {draft})" in verdict.fix
    # the list rebuilt for the new tokenizer: ok; a failed release is not what served
    assert cd.draft_vocab(_seen(fd.DraftSeen(COMMIT, new, 256, "e" * 64, 3, 10), history), dep).status is Status.OK
    history[1] = _release(2, dep.recipe.name, {"tokenizer_sha256": old, "draft_sha256": draft}, ReleaseOutcome.FAILED)
    assert cd.draft_vocab(_seen(fd.DraftSeen(COMMIT, new, 256, draft, 3, 10), history), dep).status is Status.OK


def test_no_draft_list_is_a_skip_and_runs_nothing(tmp_path):
    dep = deployment(tmp_path)
    assert fd._args(FactInput(dep.inventory.node("spark-1"), dep, build_plan(dep))) == []
    assert cd.draft_vocab({"spark-1": {}, "spark-2": {}}, dep).status is Status.SKIP
    with pytest.raises(ConfigError):
        deployment(tmp_path, lambda r: r["mounts"].__setitem__("extra", [
            {"source": "/a", "target": "/a", "draft_vocab": True}, {"source": "/b", "target": "/b", "draft_vocab": True}]))
