"""COPY_SH run by real bash against a local "source" (an ssh that runs the command here): every fetch it
starts is waited for, however their ends interleave, so the script ends with its `linked` record; a resumed
blob that fails its hash is fetched once more from byte 0 before the source is blamed."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from orchestrator.model.scripts import COPY_SH

# Runs the command it is given (its last argument) on this machine, as the source node would.
LOCAL_SSH = '#!/bin/bash\nexec bash -c "${@: -1}" </dev/null\n'


def _run_copy(tmp_path: Path, blobs: dict[str, bytes], streams: int, partial: dict[str, bytes] | None = None,
              served: dict[str, bytes] | None = None) -> subprocess.CompletedProcess:
    """`partial`: blob key -> what the target's .incomplete holds first; `served`: key -> the bytes the
    source holds in place of the blob's own (a damaged source)."""
    bin_dir, src = tmp_path / "bin", tmp_path / "src"
    bin_dir.mkdir(parents=True)
    src.mkdir()
    target = tmp_path / "cache/hub/models--org--m/blobs"
    for key, held in (partial or {}).items():
        target.mkdir(parents=True, exist_ok=True)
        (target / (hashlib.sha256(blobs[key]).hexdigest() + ".incomplete")).write_bytes(held)
    (bin_dir / "ssh").write_text(LOCAL_SSH)
    (bin_dir / "ssh").chmod(0o755)
    args = []
    for key, data in blobs.items():
        digest = hashlib.sha256(data).hexdigest()
        (src / digest).write_bytes((served or {}).get(key, data))
        args += ["F", digest, str(len(data))]
    for i, data in enumerate(blobs.values()):
        args += ["L", f"f{i}.safetensors", hashlib.sha256(data).hexdigest()]
    env = {"PATH": f"{bin_dir}:{Path(shutil.which('bash')).parent}:/usr/bin:/bin"}
    return subprocess.run(["bash", "-c", COPY_SH, "bash", str(tmp_path / "cache"), "org/m", "c" * 40, str(src),
                           "spark@127.0.0.1", "22", str(streams), "main", *args],
                          env=env, capture_output=True, text=True, timeout=20)


def test_fetches_that_end_together_are_all_waited_for(tmp_path):
    # Blobs of a few bytes end within milliseconds of each other: bash 5.2's `wait -n` lost such an end and
    # the copy then never ended (seen as a hung `model pull` in CI). 12 rounds: the race took ~1 in 3.
    blobs = {f"b{i}": f"blob {i}\n".encode() * (i + 1) for i in range(6)}
    for round_ in range(12):
        out = _run_copy(tmp_path / str(round_), blobs, streams=4)
        assert out.returncode == 0, out.stdout + out.stderr
        lines = out.stdout.splitlines()
        assert sum(line.startswith("ok\t") for line in lines) == 6, lines
        assert lines[-1] == "linked\t" + "c" * 40
        snap = tmp_path / str(round_) / "cache/hub/models--org--m/snapshots" / ("c" * 40)
        assert sorted(p.name for p in snap.iterdir()) == [f"f{i}.safetensors" for i in range(6)]
        assert (snap / "f3.safetensors").read_bytes() == blobs["b3"]


BLOB = bytes(range(256)) * 64  # 16 KiB


def test_a_partial_with_wrong_leading_bytes_is_fetched_again_from_byte_0(tmp_path):
    """The target's own .incomplete holds other bytes than the source's blob: the resumed blob fails its hash,
    and the same run fetches it whole, so the copy succeeds without blaming the source."""
    out = _run_copy(tmp_path, {"b": BLOB}, streams=1, partial={"b": b"X" * 4096})
    digest = hashlib.sha256(BLOB).hexdigest()
    assert out.returncode == 0, out.stdout + out.stderr
    records = [line.split("\t")[0] for line in out.stdout.splitlines() if not line.startswith("at\t")]
    assert records == ["got", "refetch", "got", "ok", "relinked", "linked"], out.stdout
    assert f"got\t{digest}\t{len(BLOB) - 4096}" in out.stdout and f"got\t{digest}\t{len(BLOB)}" in out.stdout
    assert (tmp_path / "cache/hub/models--org--m/blobs" / digest).read_bytes() == BLOB


def test_a_partial_of_the_full_size_with_wrong_bytes_is_fetched_again(tmp_path):
    out = _run_copy(tmp_path, {"b": BLOB}, streams=1, partial={"b": b"X" * len(BLOB)})
    assert out.returncode == 0 and "refetch\t" in out.stdout and "\nok\t" in out.stdout, out.stdout + out.stderr


def test_a_damaged_source_is_still_reported_bad_after_the_fetch_from_byte_0(tmp_path):
    """Resumed, then fetched whole once more: both hash wrong, so the blob is `bad` (the source's fault) and
    nothing is linked; a fresh fetch of a damaged blob is `bad` at once, with no second try."""
    damaged = BLOB[:8000] + b"Y" + BLOB[8001:]  # past the partial: the resumed part reads it
    resumed = _run_copy(tmp_path / "r", {"b": BLOB}, streams=1, partial={"b": BLOB[:4096]}, served={"b": damaged})
    fresh = _run_copy(tmp_path / "f", {"b": BLOB}, streams=1, served={"b": damaged})
    for out, expected in ((resumed, ["got", "refetch", "got", "bad"]), (fresh, ["got", "bad"])):
        assert out.returncode == 1, out.stdout + out.stderr
        assert [line.split("\t")[0] for line in out.stdout.splitlines() if not line.startswith("at\t")] == expected
