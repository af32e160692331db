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

from orchestrator.checks.blob_hash import BLOB_DIGEST_SH, BLOB_KEEP_SH, Hasher

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


def test_blob_keep_writes_what_it_hashes_under_the_same_rule(tmp_path, blobs):
    """The copy's one-process sink (python3): the file it writes holds the input, its digest is blob_sum's."""
    path = bin_dir(tmp_path, "python3")
    script = BLOB_DIGEST_SH + "\n" + BLOB_KEEP_SH + '\nblob_keeper || exit 9\nblob_keep "$1" "$2" "$3" < "$4"'
    for i, (source, name) in enumerate(blobs):
        out = tmp_path / f"kept-{i}"
        size = str(source.stat().st_size)
        got = subprocess.run([str(path / "bash"), "-c", script, "bash", name, size, str(out), str(source)],
                             capture_output=True, text=True, check=True, timeout=30, env={"PATH": str(path)})
        assert out.read_bytes() == source.read_bytes()
        assert got.stdout.split() == [name if len(name) in (40, 64) else "unnamed"]


def test_blob_keep_names_the_file_and_the_cause_when_it_cannot_write(tmp_path, blobs):
    path = bin_dir(tmp_path, "python3")
    script = BLOB_DIGEST_SH + "\n" + BLOB_KEEP_SH + '\nblob_keep "$1" 10 "$2" < /dev/null'
    target = tmp_path / "no-such-dir" / "blob.incomplete"
    got = subprocess.run([str(path / "bash"), "-c", script, "bash", "a" * 64, str(target)],
                         capture_output=True, text=True, timeout=30, env={"PATH": str(path)})
    assert got.returncode != 0 and got.stdout == ""
    assert got.stderr.strip().splitlines()[-1] == f"{target}: No such file or directory"


def test_without_python3_the_copy_falls_back_to_tee(tmp_path):
    path = bin_dir(tmp_path)
    script = BLOB_DIGEST_SH + "\n" + BLOB_KEEP_SH + '\nblob_keeper && echo python3 || echo tee'
    got = subprocess.run([str(path / "bash"), "-c", script], capture_output=True, text=True, timeout=30,
                         env={"PATH": str(path)})
    assert got.stdout.split() == ["tee"]
