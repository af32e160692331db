"""Checks of the controller's own files and environment that a deployment needs before it connects.

Kept apart from the model validation on purpose: `render` works on any machine (no key, no secrets),
while `validate` and `up` run these so a missing key, a key OpenSSH would refuse, a missing known_hosts
or an unset secret is bad input (exit 2) named by file:line, not a failure after connecting.
"""

from __future__ import annotations

import io
import os
import shlex
import stat
from pathlib import Path
from typing import Any, Mapping

from .files import FileRefused, check_regular, read_regular
from .hints import fixed
from .inventory import Inventory
from .load import Deployment
from .source import ConfigIssue, Document

KEY_BYTES_LIMIT = 64 * 1024  # an RSA-16384 private key is ~13 KiB
_KEY_FIX = "name an existing private key by its full path, or remove ssh.key to use ssh-agent and ~/.ssh's default keys"


def default_known_hosts(environ: Mapping[str, str]) -> str:
    """What the transport uses when the inventory sets no `ssh.known_hosts` (~/.ssh/known_hosts)."""
    home = environ.get("HOME") or str(Path.home())
    return str(Path(home) / ".ssh" / "known_hosts")


def key_problem(path: str) -> str | None:
    """Why `path` cannot serve as the SSH private key (None: it can)."""
    try:
        st = check_regular(path)
    except FileRefused as exc:
        return fixed(f"private key {path}: {exc}", _KEY_FIX)
    if st.st_mode & 0o077:
        mode = stat.S_IMODE(st.st_mode)
        return fixed(f"private key {path} is readable by group or others (mode {mode:04o}); OpenSSH refuses such a key",
                     f"chmod 600 {shlex.quote(path)}")
    try:
        text = read_regular(path, KEY_BYTES_LIMIT).decode("utf-8")
    except FileRefused as exc:
        return fixed(f"private key {path}: {exc}", _KEY_FIX)
    except UnicodeDecodeError:
        return fixed(f"{path} is not a private key (binary data)", _KEY_FIX)
    import paramiko  # here, not at the top: `validate` of an inventory without ssh.key does not pay for it

    for cls in (paramiko.Ed25519Key, paramiko.RSAKey, paramiko.ECDSAKey):
        try:
            cls.from_private_key(io.StringIO(text))
            return None
        except paramiko.PasswordRequiredException:
            return fixed(f"private key {path} is encrypted and needs a passphrase, which spark-deploy cannot ask for",
                         "use an unencrypted key, or remove ssh.key and load the key into ssh-agent")
        except Exception:  # noqa: BLE001 - paramiko raises many kinds on garbage; the next class may fit
            continue
    if text.lstrip().startswith(("ssh-", "ecdsa-", "sk-")):
        return fixed(f"{path} is a public key, not a private key", f"name the private one: `key: {path.removesuffix('.pub')}`"
                     if path.endswith(".pub") else "name the private key file (the one without .pub)")
    return fixed(f"{path} is not a private key paramiko can read", "name an Ed25519, RSA or ECDSA private key in "
                 "OpenSSH or PEM format (`ssh-keygen -t ed25519` makes one)")


def _known_hosts_problem(path: str) -> str | None:
    try:
        check_regular(path)
    except FileRefused as exc:
        return fixed(f"known_hosts file {path}: {exc} (host keys must be known before connecting: unknown keys are "
                     "refused)", f"`spark-deploy setup ADDRESS...` records the nodes' host keys after you confirm "
                     f"each fingerprint, or set ssh.known_hosts to the file that holds them")
    if not os.access(path, os.R_OK):
        return fixed(f"known_hosts file {path}: cannot read file: permission denied",
                     "make it readable by this user (chmod u+r), or run as its owner")
    return None


def ssh_problems(dep: Deployment, doc: Document) -> list[ConfigIssue]:
    """Every `ssh.key` written in the inventory (defaults and per node) and the known_hosts file."""
    return inventory_ssh_problems(dep.inventory, doc)


def inventory_ssh_problems(inv: Inventory, doc: Document) -> list[ConfigIssue]:
    """ssh_problems for an inventory alone (what `setup` checks of the inventory it writes)."""
    issues: list[ConfigIssue] = []
    keys: list[tuple[tuple[Any, ...], str]] = []
    if inv.ssh.key:
        keys.append((("ssh", "key"), inv.ssh.key))
    keys += [(("nodes", i, "ssh", "key"), n.ssh.key) for i, n in enumerate(inv.nodes) if n.ssh and n.ssh.key]
    verdicts: dict[str, str | None] = {}
    for loc, path in keys:
        if path not in verdicts:
            verdicts[path] = key_problem(path)
        if verdicts[path]:
            issues.append(doc.issue(loc, verdicts[path]))
    return issues


def known_hosts_problems(dep: Deployment, doc: Document, environ: Mapping[str, str]) -> list[ConfigIssue]:
    return inventory_known_hosts_problems(dep.inventory, doc, environ)


def inventory_known_hosts_problems(inv: Inventory, doc: Document, environ: Mapping[str, str]) -> list[ConfigIssue]:
    path = inv.ssh.known_hosts
    problem = _known_hosts_problem(path or default_known_hosts(environ))
    if problem and path is None:
        problem = problem.replace("; fix: ", "; it is the default because the inventory sets no ssh.known_hosts; fix: ", 1)
    return [doc.issue(("ssh", "known_hosts"), problem)] if problem else []


def secret_problems(dep: Deployment, doc: Document, environ: Mapping[str, str]) -> list[ConfigIssue]:
    """Each secret the recipe names must be set here; its value is never part of a message."""
    issues = []
    for i, name in enumerate(dep.recipe.secrets):
        if name not in environ:
            issues.append(doc.issue(("secrets", i), fixed(
                f"{name} is not set in this shell's environment",
                f"export it first (`read -rs {name} && export {name}`); it goes to each node's env-file (mode 0600), "
                "never on a command line")))
        elif "\n" in environ[name] or "\r" in environ[name] or "\0" in environ[name]:
            issues.append(doc.issue(("secrets", i), fixed(f"{name}'s value contains a line break or NUL, which a Docker "
                                                          "env-file cannot hold", f"export {name} as one line")))
    return issues


def local_problems(dep: Deployment, environ: Mapping[str, str]) -> list[ConfigIssue]:
    """Problems with this machine's SSH files and the recipe's secrets, as file:line issues.

    `validate` and `up` call this after load_deployment and before opening any connection; pass
    `os.environ`. An empty list means the deployment can be attempted.
    """
    idoc = dep.inventory_doc or Document(dep.inventory_path, None)
    rdoc = dep.recipe_doc or Document(dep.recipe_path, None)
    return (ssh_problems(dep, idoc) + known_hosts_problems(dep, idoc, environ)
            + secret_problems(dep, rdoc, environ))
