"""The node-to-node bulk hops ask for the AES-GCM-first cipher list (transport/bulk_ssh.py): the blob copy's
and the direct image copy's scripts run in real bash with an `ssh` on PATH that records the argv it got."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

from orchestrator.docker_cli.image_pipe import SEND
from orchestrator.model.scripts import COPY_SH
from orchestrator.transport.bulk_ssh import BULK_CIPHERS

# Records its argv (one per line) and swallows stdin; exits "$FAKE_SSH_RC".
FAKE_SSH = '#!/bin/bash\nprintf "%s\\n" "$@" > "$FAKE_SSH_LOG"\ncat >/dev/null\nexit "${FAKE_SSH_RC:-0}"\n'
FAKE_DOCKER = "#!/bin/bash\nprintf 'archive'\n"  # `docker save`: a few bytes


def path_with_fakes(tmp_path: Path) -> str:
    d = tmp_path / "bin"
    d.mkdir()
    for name, text in (("ssh", FAKE_SSH), ("docker", FAKE_DOCKER)):
        (d / name).write_text(text)
        (d / name).chmod(0o755)
    return f"{d}:{Path(shutil.which('bash')).parent}:/usr/bin:/bin"


def recorded(tmp_path: Path, script: str, *args: str, rc: int = 0) -> list[str]:
    log = tmp_path / "argv"
    env = {"PATH": path_with_fakes(tmp_path), "FAKE_SSH_LOG": str(log), "FAKE_SSH_RC": str(rc)}
    subprocess.run(["bash", "-c", script, "bash", *args], env=env, capture_output=True, text=True, timeout=30)
    return log.read_text().splitlines()


def cipher_of(argv: list[str]) -> str:
    assert "-c" in argv, argv
    return argv[argv.index("-c") + 1]


def test_the_blob_copy_asks_for_aes_gcm_first(tmp_path):
    argv = recorded(tmp_path, COPY_SH, str(tmp_path / "cache"), "org/m", "c" * 40, "/srv/blobs", "spark@10.0.0.1",
                    "22", "1", "", rc=1)  # the source's blobs dir "is missing": the script stops after one ssh
    assert cipher_of(argv).split(",") == list(BULK_CIPHERS)
    assert BULK_CIPHERS[0] == "aes128-gcm@openssh.com"
    assert argv[-2:] == ["spark@10.0.0.1", "test -d /srv/blobs"]


def test_the_direct_image_copy_asks_for_the_same_list(tmp_path):
    argv = recorded(tmp_path, SEND, "sha256:" + "a" * 64, "spark@10.0.0.2", "docker load", "save", "", "")
    assert cipher_of(argv).split(",") == list(BULK_CIPHERS)
    assert argv[-2:] == ["spark@10.0.0.2", "docker load"]
    assert "Compression=no" in argv
