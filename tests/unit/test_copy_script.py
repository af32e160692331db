"""COPY_SH run by real bash against a local "source" (an ssh that runs the command here): every fetch it
starts is waited for, however their ends interleave, so the script ends with its `linked` record."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
from pathlib import Path

from orchestrator.model.scripts import COPY_SH

# Runs the command it is given (its last argument) on this machine, as the source node would.
LOCAL_SSH = '#!/bin/bash\nexec bash -c "${@: -1}" </dev/null\n'


def _run_copy(tmp_path: Path, blobs: dict[str, bytes], streams: int) -> subprocess.CompletedProcess:
    bin_dir, src = tmp_path / "bin", tmp_path / "src"
    bin_dir.mkdir(parents=True)
    src.mkdir()
    (bin_dir / "ssh").write_text(LOCAL_SSH)
    (bin_dir / "ssh").chmod(0o755)
    args = []
    for data in blobs.values():
        digest = hashlib.sha256(data).hexdigest()
        (src / digest).write_bytes(data)
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
