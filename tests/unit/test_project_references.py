"""Issue 22, acceptance 4: the project cites only itself — every "field note N" exists in docs/field-notes.md,
each note names its report, and nothing under orchestrator/, docs/, recipes/ or the README points at a path
outside the project (`../shared/...`)."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SCANNED = [ROOT / "README.md", *[p for d in ("orchestrator", "docs", "recipes") for p in (ROOT / d).rglob("*")
                                 if p.is_file() and p.suffix in {".py", ".md", ".yaml", ".yml", ".j2", ".txt", ".sh"}]]
CITE = re.compile(r"field[- ]notes?\s+(\d+)(?:\s*(?:-|–|and|,)\s*(\d+))?", re.IGNORECASE)


def _notes() -> dict[int, str]:
    text = (ROOT / "docs" / "field-notes.md").read_text()
    return {int(m.group(1)): m.group(2) for m in re.finditer(r"^(\d+)\. (.*?)(?=^\d+\. |^## |\Z)", text, re.S | re.M)}


def test_every_field_note_names_its_report():
    notes = _notes()
    assert sorted(notes) == list(range(1, 22))
    for number, body in notes.items():
        assert re.search(r"— \[[A-E]\](, \[[A-E]\])*\s*$", body.strip()), f"field note {number} cites no report"


def test_every_cited_field_note_exists():
    notes = _notes()
    cited: list[tuple[str, int]] = []
    for path in SCANNED:
        for m in CITE.finditer(path.read_text(errors="replace")):
            numbers = [int(m.group(1))] + ([int(m.group(2))] if m.group(2) else [])
            cited += [(str(path.relative_to(ROOT)), n) for n in numbers]
    assert len(cited) > 50  # the scan really read the project's citations
    missing = [(p, n) for p, n in cited if n not in notes]
    assert missing == []


def test_nothing_points_outside_the_project():
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in SCANNED
            for i, line in enumerate(p.read_text(errors="replace").splitlines(), 1) if "shared/" in line]
    assert hits == []
