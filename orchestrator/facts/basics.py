"""The facts `up` always read: the Docker engine answering, the GPUs nvidia-smi lists, the state dir writable
by the login user (the judges are preflight's checks_basic.py: docker, gpu, state-dir)."""

from __future__ import annotations

from dataclasses import dataclass

from ..checks import writable
from . import engine
from .core import fact


# "$@" a command: prints its exit code, then what it printed (stdout and stderr, in order).
_RAN = 'out=$("$@" 2>&1); rc=$?; printf \'%s\\n%s\\n\' "$rc" "$out"'


@dataclass(frozen=True)
class Ran:
    code: int
    output: str

    def first_line(self) -> str:
        return (self.output.strip() or f"exit {self.code}").splitlines()[0]

    def last_line(self) -> str:
        return (self.output.strip().splitlines() or ["no answer"])[-1]


@fact("docker_version", _RAN, args=lambda _i: ["docker", "version", "--format", "{{.Server.Version}}"],
      api=engine.Op.SERVER_VERSION, api_args=lambda _i: [])
def parse_ran(stdout: str) -> Ran:
    """The `_RAN` wrapper's output -> the command's exit code and output."""
    code, _, output = stdout.partition("\n")
    return Ran(int(code), output)


fact("gpu_list", _RAN, args=lambda _i: ["nvidia-smi", "-L"])(parse_ran)
@fact("state_dir", writable.PROBE, args=lambda i: [i.node.state_dir])
def parse_state_dir(stdout: str) -> str:
    """Kept as printed: the judge parses it with the node's path (writable.parse)."""
    if not stdout.startswith("user "):
        raise ValueError(f"not the probe's output: {stdout[:80]!r}")
    return stdout
