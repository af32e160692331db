"""Test modules are imported by basename (pytest's default `prepend` import mode, no packages under tests/):
two files of one name in different folders pass when each folder runs alone and break collection when the
README's one command runs them together. This test is that one command's view, cheap enough to run always."""
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]


def test_no_two_test_modules_share_a_basename():
    where: dict[str, list[str]] = defaultdict(list)
    for path in TESTS.rglob("test_*.py"):
        if "__pycache__" not in path.parts:
            where[path.name].append(str(path.relative_to(TESTS)))
    clashes = {name: paths for name, paths in where.items() if len(paths) > 1}
    assert not clashes, f"test modules sharing a basename (pytest cannot collect both in one run): {clashes}"
