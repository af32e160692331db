"""checks/blob_hash.py's hasher choice, run in real bash with PATH holding only the programs a node might
have: the fastest present is chosen, one that gives a wrong digest is passed over, and every choice gives
the same digests (sha256 of an LFS blob, the git blob id of a small file)."""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator.checks.blob_hash import BLOB_DIGEST_SH, Hasher

BASE = ("bash", "cat", "stat", "sha256sum", "sha1sum")  # what every node has (coreutils)
PROBE = BLOB_DIGEST_SH + '\nprintf "%s\\n" "$BLOB_HASHER"; for a; do blob_digest "${a%:*}" "${a#*:}"; done'


def bin_dir(tmp_path: Path, *extra: str, fake_openssl: bool = False) -> Path:
    d = tmp_path / "bin"
    d.mkdir()
    for tool in BASE:
        (d / tool).symlink_to(shutil.which(tool))
    if "python3" in extra:
        (d / "python3").symlink_to(sys.executable)
    if "openssl" in extra:
        if fake_openssl:  # present, runs, prints a digest-shaped wrong answer
            (d / "openssl").write_text("#!/bin/sh\ncat >/dev/null; echo 0000 '*stdin'\n")
            (d / "openssl").chmod(0o755)
        else:
            (d / "openssl").symlink_to(shutil.which("openssl"))
    return d


def run(path: Path, *files: tuple[Path, str]) -> list[str]:
    args = [f"{f}:{name}" for f, name in files]
    out = subprocess.run([str(path / "bash"), "-c", PROBE, "bash", "-", *args], capture_output=True, text=True,
                         check=True, timeout=30, env={"PATH": str(path), "LC_ALL": "C"})
    return out.stdout.split()


@pytest.fixture
def blobs(tmp_path) -> list[tuple[Path, str]]:
    big, small = os.urandom(3 << 20), b'{"architectures": ["X"]}\n'
    (tmp_path / "big").write_bytes(big)
    (tmp_path / "small").write_bytes(small)
    git_id = hashlib.sha1(b"blob %d\0" % len(small) + small).hexdigest()
    return [(tmp_path / "big", hashlib.sha256(big).hexdigest()), (tmp_path / "small", git_id),
            (tmp_path / "small", "not-a-hash")]


@pytest.mark.skipif(shutil.which("openssl") is None, reason="this machine has no openssl binary")
@pytest.mark.parametrize("present, chosen", [
    (("openssl", "python3"), Hasher.OPENSSL),
    (("python3",), Hasher.PYTHON3),
    ((), Hasher.COREUTILS),
])
def test_the_fastest_present_is_chosen_and_every_choice_gives_the_same_digests(tmp_path, blobs, present, chosen):
    out = run(bin_dir(tmp_path, *present), *blobs)
    assert out[0] == chosen
    assert out[1:] == [blobs[0][1], blobs[1][1], "unnamed"]


def test_a_hasher_that_gives_a_wrong_digest_is_passed_over(tmp_path, blobs):
    out = run(bin_dir(tmp_path, "openssl", "python3", fake_openssl=True), *blobs[:1])
    assert out == [Hasher.PYTHON3, blobs[0][1]]


def test_an_unreadable_blob_fails_instead_of_printing_a_digest(tmp_path):
    path = bin_dir(tmp_path, "python3")
    script = BLOB_DIGEST_SH + '\nblob_digest "$1" "$2"'
    out = subprocess.run([str(path / "bash"), "-c", script, "bash", str(tmp_path / "gone"), "a" * 64],
                         capture_output=True, text=True, timeout=30, env={"PATH": str(path)})
    assert out.returncode != 0 and out.stdout == ""
