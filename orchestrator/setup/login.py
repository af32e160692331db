"""Login: a key that already works, or a dedicated ed25519 key installed once with the user's password.

The password is asked once (by the caller), used for SSH password authentication only, and never stored,
logged or put in an argv; the public key reaches the node as "$1" of a constant script.
"""

from __future__ import annotations

import os
import shlex
import socket
from dataclasses import dataclass
from pathlib import Path

import paramiko
from cryptography.hazmat.primitives import serialization
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey

CONNECT_TIMEOUT = 10.0
DEFAULT_KEY = "~/.ssh/spark-deploy_ed25519"

# "$1" the public key line: appended to the login's authorized_keys unless it is there already.
INSTALL_SH = r'''umask 077
mkdir -p -- "$HOME/.ssh"
f=$HOME/.ssh/authorized_keys
touch -- "$f"
grep -qxF -- "$1" "$f" || printf '%s\n' "$1" >> "$f"
chmod 600 -- "$f"'''


class LoginFailed(Exception):
    """No way in: the key was refused and no password was given, or the password was refused too."""


@dataclass(frozen=True)
class Login:
    host: str
    port: int
    user: str
    known_hosts: str


def _client(login: Login) -> paramiko.SSHClient:
    client = paramiko.SSHClient()
    client.load_host_keys(login.known_hosts)
    client.set_missing_host_key_policy(paramiko.RejectPolicy())
    return client


def key_works(login: Login, key: str | None) -> bool:
    """Whether `key` (None: the agent and ~/.ssh's default keys, as `up` would use) logs in."""
    client = _client(login)
    kwargs = {"look_for_keys": key is None, "allow_agent": key is None, "key_filename": key}
    try:
        client.connect(login.host, port=login.port, username=login.user, timeout=CONNECT_TIMEOUT,
                       banner_timeout=CONNECT_TIMEOUT, auth_timeout=CONNECT_TIMEOUT, **kwargs)
        return True
    except paramiko.AuthenticationException:
        return False
    except paramiko.SSHException as exc:
        if "No authentication methods available" in str(exc):  # no key to offer at all: not logged in
            return False
        raise LoginFailed(f"{login.host}: SSH as {login.user} failed: {exc}") from None
    except (OSError, socket.timeout) as exc:
        raise LoginFailed(f"{login.host}: SSH as {login.user} failed: {exc}") from None
    finally:
        client.close()


def new_key(path: str, comment: str) -> str:
    """Create an ed25519 key pair at `path` (0600) and `path`.pub unless it exists; returns the public line."""
    private = Path(path)
    public = Path(path + ".pub")
    if private.exists() and public.exists():
        return public.read_text().strip()
    key = Ed25519PrivateKey.generate()
    private.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    fd = os.open(private, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "wb") as handle:
        handle.write(key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.OpenSSH,
                                       serialization.NoEncryption()))
    line = key.public_key().public_bytes(serialization.Encoding.OpenSSH,
                                         serialization.PublicFormat.OpenSSH).decode() + f" {comment}"
    public.write_text(line + "\n")
    return line


def install(login: Login, password: str, public_line: str) -> None:
    """Log in with the password once and authorise `public_line` for the user."""
    client = _client(login)
    try:
        client.connect(login.host, port=login.port, username=login.user, password=password, look_for_keys=False,
                       allow_agent=False, timeout=CONNECT_TIMEOUT, banner_timeout=CONNECT_TIMEOUT,
                       auth_timeout=CONNECT_TIMEOUT)
        _, out, err = client.exec_command(shlex.join(["bash", "-c", INSTALL_SH, "install", public_line]),
                                          timeout=30)
        code = out.channel.recv_exit_status()
        if code != 0:
            raise LoginFailed(f"{login.host}: installing the key for {login.user} failed (exit {code}): "
                              f"{err.read().decode(errors='replace').strip()[-300:]}")
    except paramiko.AuthenticationException:
        raise LoginFailed(f"{login.host}: the password was refused for {login.user} (or the node allows no "
                          "password login: install the key by hand, `ssh-copy-id -i KEY.pub USER@HOST`)") from None
    except (paramiko.SSHException, OSError, socket.timeout) as exc:
        raise LoginFailed(f"{login.host}: SSH as {login.user} failed: {exc}") from None
    finally:
        client.close()
