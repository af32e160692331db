"""Host keys: fetched over a bare SSH transport, shown as SHA256 fingerprints, trusted only when a person
(or `--fingerprint HOST=SHA256:...`) says so, and then written to the known_hosts the inventory names.
Never trust on first use silently: with `--yes` a host whose key is not known must be given a fingerprint.
"""

from __future__ import annotations

import base64
import hashlib
import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import paramiko

CONNECT_TIMEOUT = 10.0
KEY_TYPES = ("ssh-ed25519", "ecdsa-sha2-nistp256", "rsa-sha2-512")


class HostKeyRefused(Exception):
    """A host key was not confirmed, did not match what was given, or differs from the known one."""


@dataclass(frozen=True)
class HostKey:
    host: str
    port: int
    key: paramiko.PKey

    @property
    def name(self) -> str:
        """The known_hosts name: `host`, or `[host]:port` off port 22 (as OpenSSH writes it)."""
        return self.host if self.port == 22 else f"[{self.host}]:{self.port}"

    @property
    def fingerprint(self) -> str:
        return fingerprint(self.key)

    @property
    def line(self) -> str:
        return f"{self.name} {self.key.get_name()} {self.key.get_base64()}\n"


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256 fingerprint: unpadded base64 of the sha256 of the key blob."""
    return "SHA256:" + base64.b64encode(hashlib.sha256(key.asbytes()).digest()).decode().rstrip("=")


def fetch(host: str, port: int = 22, timeout: float = CONNECT_TIMEOUT) -> HostKey:
    """The node's host key, read from the key exchange alone (no authentication, nothing trusted)."""
    try:
        sock = socket.create_connection((host, port), timeout=timeout)
    except OSError as exc:
        raise HostKeyRefused(f"{host}: cannot reach port {port}: {exc.strerror or exc}") from None
    transport = paramiko.Transport(sock)
    try:
        options = transport.get_security_options()
        options.key_types = [t for t in KEY_TYPES if t in options.key_types] + \
                            [t for t in options.key_types if t not in KEY_TYPES]
        transport.start_client(timeout=timeout)
        return HostKey(host, port, transport.get_remote_server_key())
    except (paramiko.SSHException, EOFError, OSError) as exc:
        raise HostKeyRefused(f"{host}: no SSH host key from port {port}: {exc}") from None
    finally:
        transport.close()


def known(path: str, key: HostKey) -> bool | None:
    """True: `path` already holds this key for the host; None: it holds none; a different key of the same
    type raises (a changed host key is never replaced silently)."""
    if not os.path.exists(path):
        return None
    entries = paramiko.HostKeys(path).lookup(key.name) or {}
    held = entries.get(key.key.get_name())
    if held is None:
        return None
    if held.asbytes() != key.key.asbytes():
        raise HostKeyRefused(f"{key.host}: its {key.key.get_name()} host key {key.fingerprint} differs from the "
                             f"one in {path} ({fingerprint(held)}): the node was reinstalled or someone is in "
                             f"between; check, then remove the old line (`ssh-keygen -R {key.name} -f {path}`)")
    return True


Ask = Callable[[HostKey], str]  # the person's answer to "trust this key?": yes, no, or a fingerprint


def confirm(key: HostKey, given: dict[str, str], ask: Ask | None) -> None:
    """Raise unless the key is confirmed: by `--fingerprint HOST=...` (must match), or by the answer
    `yes` or the pasted fingerprint itself (as OpenSSH asks). No way to ask and none given: refused."""
    expected = given.get(key.host)
    if expected is not None:
        if expected != key.fingerprint:
            raise HostKeyRefused(f"{key.host}: host key {key.fingerprint} is not the --fingerprint given "
                                 f"({expected}); nothing was written")
        return
    if ask is None:
        raise HostKeyRefused(f"{key.host}: host key {key.fingerprint} is not known and --yes cannot trust it: "
                             f"pass --fingerprint {key.host}=SHA256:... (from the node's console: "
                             "`ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub`)")
    answer = ask(key).strip()
    if answer.lower() == "yes" or answer == key.fingerprint:
        return
    if answer.startswith("SHA256:"):
        raise HostKeyRefused(f"{key.host}: the fingerprint answered ({answer}) is not its host key's "
                             f"({key.fingerprint}); nothing was written")
    raise HostKeyRefused(f"{key.host}: host key {key.fingerprint} not trusted (answered {answer[:20]!r}); "
                         "nothing was written")


def write(path: str, keys: list[HostKey]) -> list[HostKey]:
    """Append the keys `path` does not hold yet (made 0600 with its directory 0700 if new); returns them."""
    new = [k for k in keys if not known(path, k)]
    if not new:
        return []
    Path(path).parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
    with os.fdopen(fd, "a", encoding="utf-8") as handle:
        if handle.tell() > 0 and not Path(path).read_bytes().endswith(b"\n"):
            handle.write("\n")
        handle.writelines(k.line for k in new)
    return new
