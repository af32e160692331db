"""The whole of `setup`, in order: host keys, login, discovery, fabric, judgement, node keys, inventory.

Nothing is written before every host key is confirmed; the inventory is written only when no problem is
left and it validates; an existing one is replaced only after its difference was shown and accepted.
Setup runs before an inventory exists, so it cannot open an Operation or Observation (both start from
one): it opens its own connections, reads only, and changes nodes only for the opt-in node keys.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from ..releases import identity
from ..transport.cancel import CancelToken
from ..transport.group import GroupError, on_all
from ..transport.node import NodeConnection, SSHTarget
from . import document, hostkeys, login, nodekeys
from .document import Access
from .fabric import PROBE_FACT, Candidate, Fabric, candidates, choose, management_of, probe_targets
from .facts import STATE_DIR, gather, run_facts
from .judge import Decision, Problem, decide


class Prompts(Protocol):
    """What `setup` asks a person; `interactive` False (--yes) means it may ask nothing."""

    interactive: bool

    def host_key(self, key: hostkeys.HostKey) -> str: ...

    def password(self, user: str, hosts: list[str]) -> str: ...

    def confirm(self, question: str, detail: list[str]) -> bool: ...

    def say(self, text: str) -> None: ...


@dataclass(frozen=True)
class Options:
    hosts: list[str]
    user: str
    port: int
    output: str
    known_hosts: str
    cluster: str = "spark"
    key: str | None = None  # a key to try first (None: the agent and ~/.ssh's defaults)
    new_key: str = ""  # where a new key is made ("": ~/.ssh/spark-deploy_ed25519 of this run's HOME)
    fingerprints: dict[str, str] = field(default_factory=dict)
    node_keys: bool | None = None  # None: ask (interactive), else no


class SetupFailed(Exception):
    """A refusal before discovery (host key, login, an unreachable node); nothing was written."""


@dataclass
class Outcome:
    decision: Decision
    inventory: str = ""  # the text setup would write
    diff: str = ""
    written: bool = False
    known_hosts_added: list[str] = field(default_factory=list)
    key: str | None = None
    node_keys: list[str] = field(default_factory=list)
    declined: str = ""  # why nothing was written although no problem was found

    @property
    def problems(self) -> list[Problem]:
        return self.decision.problems


def trust_host_keys(opts: Options, prompts: Prompts) -> list[str]:
    """Fetch, confirm every key, then write them all; a refusal raises before anything is written."""
    keys = [hostkeys.fetch(h, opts.port) for h in opts.hosts]
    for key in keys:
        if not hostkeys.known(opts.known_hosts, key):
            hostkeys.confirm(key, opts.fingerprints, prompts.host_key if prompts.interactive else None)
    return [f"{k.name} {k.fingerprint}" for k in hostkeys.write(opts.known_hosts, keys)]


def choose_key(opts: Options, prompts: Prompts) -> str | None:
    """A key that logs in everywhere: the one given (or the defaults), else a new one installed once."""
    logins = [login.Login(h, opts.port, opts.user, opts.known_hosts) for h in opts.hosts]
    refused = [lg.host for lg in logins if not login.key_works(lg, opts.key)]
    if not refused:
        return opts.key
    if not prompts.interactive:
        raise SetupFailed(f"{', '.join(refused)}: {opts.user} cannot log in with "
                          f"{opts.key or 'the agent or ~/.ssh default keys'}, and --yes cannot ask for a password: "
                          "pass --key, or run setup without --yes once to install a key")
    path = opts.new_key or os.path.expanduser(login.DEFAULT_KEY)
    public = login.new_key(path, f"spark-deploy {opts.user}")
    prompts.say(f"{', '.join(refused)}: no key logs in; installing {path}.pub for {opts.user} "
                "(the password is asked once and used for this only)")
    password = prompts.password(opts.user, opts.hosts)
    try:
        for lg in logins:
            if not login.key_works(lg, path):
                login.install(lg, password, public)
    finally:
        del password
    still = [lg.host for lg in logins if not login.key_works(lg, path)]
    if still:
        raise SetupFailed(f"{', '.join(still)}: the installed key {path} still does not log in "
                          "(sshd may ignore ~/.ssh/authorized_keys: check AuthorizedKeysFile)")
    return path


def _connect(opts: Options, key: str | None) -> dict[str, NodeConnection]:
    cancel = CancelToken()
    conns = {h: NodeConnection(SSHTarget(h, h, opts.user, opts.port, key, opts.known_hosts), cancel=cancel)
             for h in opts.hosts}
    try:
        on_all(list(conns.values()), lambda c: c.open(), lambda c: c.name, cancel=cancel)
    except GroupError as exc:
        _close(conns)
        raise SetupFailed(str(exc)) from None
    return conns


def _close(conns: dict[str, NodeConnection]) -> None:
    for conn in conns.values():
        try:
            conn.close()
        except Exception:  # noqa: BLE001 - closing what is left; the outcome is already decided
            pass


def discover(opts: Options, conns: dict[str, NodeConnection]) -> tuple[Decision, Fabric]:
    """Every fact on every node, the probes between them, and the decision (values and problems)."""
    try:
        seen = on_all(list(conns.values()), gather, lambda c: c.name)
    except GroupError as exc:
        raise SetupFailed(f"discovery failed: {exc}") from None
    management: dict[str, str | None] = {}
    cands: dict[str, list[Candidate]] = {}
    for host in opts.hosts:
        links = seen[host]["links"].value if seen[host]["links"].ok else {}
        route = seen[host]["default_route"].value if seen[host]["default_route"].ok else None
        management[host] = management_of(route, links, host)
        cands[host] = candidates(host, links, management[host])
    speeds = {h: (seen[h]["speeds"].value if seen[h]["speeds"].ok else {}) for h in opts.hosts}
    fabric = Fabric()
    if len(opts.hosts) > 1:
        def probe(conn: NodeConnection):
            targets = probe_targets(cands, conn.name)
            return run_facts(conn, [PROBE_FACT], [opts.port, *targets])["probe"] if targets else None
        try:
            observed = on_all(list(conns.values()), probe, lambda c: c.name)
        except GroupError as exc:
            raise SetupFailed(f"probing the fabric failed: {exc}") from None
        probes = {h: (o.value if o is not None and o.ok else {}) for h, o in observed.items()}
        names = {h: (seen[h]["hostname"].value if seen[h]["hostname"].ok else h) for h in opts.hosts}
        fabric = choose(cands, probes, speeds, names)
    return decide(opts.hosts, seen, cands, fabric, management), fabric


def _identity(opts: Options, conns: dict[str, NodeConnection]) -> str:
    """The cluster's identity, recorded in the inventory: the one the head holds (a cluster set up before,
    perhaps under another --cluster), else --cluster, written to every node now (releases/identity.py)."""
    path = posixpath.join(STATE_DIR, identity.FILE)
    asker = identity.Asker(opts.hosts[0], opts.cluster, None, lambda _node: path,
                           lambda fn, some: on_all(some, fn, lambda c: c.name))
    try:
        head, _ = identity.claim(asker, [conns[h] for h in opts.hosts], write=True)
    except identity.IdentityMismatch as exc:
        raise SetupFailed(str(exc)) from None
    except GroupError as exc:
        raise SetupFailed(f"reading the cluster's identity failed: {exc}") from None
    return head.id if head is not None else opts.cluster


def run(opts: Options, prompts: Prompts) -> Outcome:
    added = trust_host_keys(opts, prompts)
    key = choose_key(opts, prompts)
    conns = _connect(opts, key)
    try:
        decision, fabric = discover(opts, conns)
        outcome = Outcome(decision, known_hosts_added=added, key=key)
        if decision.problems:
            return outcome
        if fabric.found and opts.node_keys is not False:
            plans = [nodekeys.Plan(n.name.value, n.fabric_ip.value) for n in decision.nodes]
            steps = nodekeys.plan_text(plans)
            wanted = opts.node_keys or (prompts.interactive and prompts.confirm(
                "Set up node-to-node SSH over the fabric (for image and model copies)?", steps))
            if wanted:
                by_name = {n.name.value: conns[n.host] for n in decision.nodes}
                outcome.node_keys = nodekeys.apply(by_name, plans, opts.port)
        cluster_id = _identity(opts, conns)
    finally:
        _close(conns)
    access = Access(opts.cluster, opts.user, opts.port, str(Path(key).resolve()) if key else None,
                    str(Path(opts.known_hosts).resolve()), cluster_id)
    outcome.inventory = document.render(document.build(decision, access))
    outcome.diff = document.diff(opts.output, outcome.inventory)
    if not outcome.diff:
        outcome.declined = f"{opts.output} already says this: left as it is"
        document.check(opts.output, os.environ)
        return outcome
    if os.path.exists(opts.output) and not (not prompts.interactive or prompts.confirm(
            f"Replace {opts.output} with this?", outcome.diff.splitlines())):
        outcome.declined = f"{opts.output} left as it was (not confirmed)"
        return outcome
    document.write(opts.output, outcome.inventory, os.environ)
    outcome.written = True
    return outcome
