"""systemd on an in-memory node: its boot facts (boot_units, restart_policies) for memnode/facts.py.

Unit files are the node's files under /etc/systemd/system (written by `put_file`, as `boot enable` does);
`systemctl daemon-reload / enable / disable` change what is loaded and enabled; `start`, `kill --signal=SIGKILL`
and `reset-failed` what runs (`show -p ActiveState --value` reads it).
"""

from __future__ import annotations

import json
import shlex

from orchestrator.deploy import privilege
from orchestrator.facts import boot as boot_facts
from orchestrator.render.unit import UNIT_DIR

from .docker import Answer, unknown
from .model import Node

# what a simulated systemd node has enabled before spark-deploy (tests/unit/samples/boot_units_sim_head.txt)
BASE_UNITS = {
    "containerd.service": "ExecStart=/usr/bin/containerd",
    "docker.service": "ExecStart=/usr/sbin/dockerd -H fd:// --containerd=/run/containerd/containerd.sock",
    "ssh.service": "ExecStart=/usr/sbin/sshd -D",
    "docker.socket": "",
}


def _exec(value: str) -> str:
    """systemctl show's rendering of one Exec line: its argv unquoted, in systemd 252's frame."""
    argv = shlex.split(value.lstrip("-@+!"))
    return (f"{{ path={argv[0]} ; argv[]={' '.join(argv)} ; ignore_errors={'yes' if value.startswith('-') else 'no'} "
            "; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }")


class Systemd:
    """The unit files loaded at the last daemon-reload, and which are enabled."""

    def __init__(self) -> None:
        self.loaded: dict[str, str] = {}  # unit name -> text
        self.enabled: set[str] = set(BASE_UNITS)
        self.active: set[str] = set(BASE_UNITS)  # started units (ours: watching their running container)
        self.failed: set[str] = set()

    def text(self, node: Node, name: str) -> str:
        return BASE_UNITS.get(name, self.loaded.get(name, ""))

    def reload(self, node: Node) -> None:
        self.loaded = {p.rsplit("/", 1)[1]: t for p, t in node.files.items() if p.startswith(UNIT_DIR + "/")}

    def systemctl(self, node: Node, args: list[str]) -> Answer:
        if args == ["daemon-reload"]:
            self.reload(node)
            return 0, "", ""
        if len(args) == 2 and args[0] in ("enable", "disable"):
            name = args[1]
            if name not in self.loaded and name not in BASE_UNITS:
                return 1, "", f"Failed to {args[0]} unit: Unit file {name} does not exist.\n"
            (self.enabled.add if args[0] == "enable" else self.enabled.discard)(name)
            verb = "Created symlink" if args[0] == "enable" else "Removed"
            return 0, "", f"{verb} /etc/systemd/system/multi-user.target.wants/{name}.\n"
        if len(args) == 2 and args[0] == "start":
            if args[1] not in self.loaded and args[1] not in BASE_UNITS:
                return 5, "", f"Failed to start {args[1]}: Unit {args[1]} not found.\n"
            self.active.add(args[1])
            self.failed.discard(args[1])
            return 0, "", ""
        if args[:1] == ["kill"] and args[1:2] == ["--signal=SIGKILL"] and len(args) == 3:
            if args[2] not in self.active:
                return 1, "", f"Failed to kill unit {args[2]}: No main process to kill\n"
            self.active.discard(args[2])
            self.failed.add(args[2])  # killed: no restart (RestartPreventExitStatus) and no ExecStop
            return 0, "", ""
        if len(args) == 2 and args[0] == "reset-failed":
            self.failed.discard(args[1])
            return 0, "", ""
        if args[:4] == ["show", "-p", "ActiveState", "--value"] and len(args) == 5:
            name = args[4]
            state = "active" if name in self.active else "failed" if name in self.failed else "inactive"
            return 0, state + "\n", ""
        if len(args) == 2 and args[0] == "is-enabled":  # systemctl's words and exit codes for a unit file
            name = args[1]
            if name not in self.loaded and name not in BASE_UNITS:
                return 1, "", f"Failed to get unit file state for {name}: No such file or directory\n"
            return (0, "enabled\n", "") if name in self.enabled else (1, "disabled\n", "")
        raise unknown(f"systemctl {' '.join(args)}")

    def boot_units(self, node: Node) -> Answer:
        names = sorted(self.enabled)
        out = ["@@enabled", *[f"{n} enabled enabled" for n in names], "@@ourfiles"]
        out += [f"{n} {'enabled' if n in self.enabled else 'disabled'} enabled"
                for n in sorted(self.loaded) if n.startswith(boot_facts.OUR_UNIT_PREFIX)]
        out.append("@@show")
        services = [n for n in names if n.endswith(".service")]
        for name in services:
            lines = self.text(node, name).splitlines()
            for key in ("ExecStartPre", "ExecStart"):
                out += [f"{key}={_exec(line.split('=', 1)[1])}" for line in lines if line.startswith(key + "=")]
            where = "/lib/systemd/system" if name in BASE_UNITS else UNIT_DIR
            out += [f"Id={name}", f"FragmentPath={where}/{name}", ""]
        for name in services:
            if name.startswith(boot_facts.OUR_UNIT_PREFIX):
                out.append(f"@@ours {name}")
                out += [line for line in self.text(node, name).splitlines()
                        if line.startswith(boot_facts.UNIT_KEY_PREFIX)]
        return 0, "\n".join(out) + "\n", ""


def restart_policies(node: Node, fmt: str) -> Answer:
    assert fmt == boot_facts._RESTART_FORMAT, "the restart policies are printed in the fact's own format"
    lines = []
    for c in node.containers.values():
        lines.append(json.dumps({"Id": c.id, "Name": "/" + c.name, "Image": c.image, "Ref": c.image,
                                 "State": {"Status": c.state, "ExitCode": c.exit_code},
                                 "Restart": {"MaximumRetryCount": 0, "Name": c.restart},
                                 "Config": {"Labels": c.labels}}, separators=(",", ":")))
    return 0, "".join(line + "\n" for line in lines), ""


def root_probe(node: Node) -> Answer:
    """privilege._PROBE as the node's login user sees it: the unit tests log in as root."""
    return 0, "root root\n", ""


SCRIPTS = [(privilege._PROBE, root_probe)]
