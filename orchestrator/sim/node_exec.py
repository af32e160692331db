"""`docker exec` into a node that returns all of the command's output, or says it could not.

The engine here (Docker 20.10 with containerd 1.6) can end an exec of a short-lived process with its exit
code and without the last of its output: the process exits while its output is still in flight, and the
stream closes (the same race as docker-py issue 2042 and moby issue 27289). This project's CI met it twice:
an empty host key (2026-12-03) and an empty `readlink` (2026-12-04), both with exit 0.

So a command runs under a small `sh` that holds the exec open until the client has seen all of it:
- it waits for a first line on stdin, so nothing is printed before the stream is attached;
- it runs the command (stdin /dev/null, as `docker exec` without -i);
- it writes an end marker on stdout and on stderr;
- it waits for the client's acknowledgement, sent once both markers have arrived, and exits with the
  command's code.

The command's argv travels in the environment, not on the wrapper's command line, so `ps` and `pgrep -f`
see the command as it was given.
"""

from __future__ import annotations

import shlex
import time

from docker.utils.socket import STDOUT, frames_iter

from .state import SimError

END = b"\x1esim-exec-end\n"
_ARGV_VAR = "SIM_EXEC_ARGV"
_ENV_STRING_MAX = 128 * 1024 - 64  # Linux's MAX_ARG_STRLEN is per string: "SIM_EXEC_ARGV=" + the command
WRAPPER = (f'read -r _ || exit 125; c=${_ARGV_VAR}; unset {_ARGV_VAR}; eval "$c" </dev/null; rc=$?; '
           r"printf '\036sim-exec-end\n'; printf '\036sim-exec-end\n' >&2; read -r _; exit $rc")


def exec_whole(container, argv: list[str]) -> tuple[int, bytes, bytes]:
    """(exit code, stdout, stderr) of argv run in the container as `docker exec` runs it."""
    api = container.client.api
    command = shlex.join(argv)
    if len(command.encode()) > _ENV_STRING_MAX:  # one environment string cannot hold it: exec it as it is
        code, (out, err) = container.exec_run(argv, demux=True)
        return code, out or b"", err or b""
    exec_id = api.exec_create(container.id, ["sh", "-c", WRAPPER], stdin=True, stdout=True, stderr=True,
                              environment={_ARGV_VAR: command})["Id"]
    sock = api.exec_start(exec_id, socket=True)
    out, err = bytearray(), bytearray()
    acked = False
    try:
        sock._sock.sendall(b"go\n")
        for stream, data in frames_iter(sock, tty=False):
            (out if stream == STDOUT else err).extend(data)
            if not acked and out.endswith(END) and err.endswith(END):
                sock._sock.sendall(b"ok\n")
                acked = True
    finally:
        sock.close()
    code = _exit_code(api, exec_id)
    if not acked:  # the wrapper never got to its markers: killed (a reboot, a fault) or the stream broke
        if code == 0:
            raise SimError(f"{container.name}: {argv!r}: the exec ended with code 0 but its output was cut")
        return (-1 if code is None else code), bytes(out), bytes(err)
    return code, bytes(out[:-len(END)]), bytes(err[:-len(END)])


def _exit_code(api, exec_id: str, bound: float = 10.0) -> int | None:
    """The exec's code once the engine has recorded its end (its stream closes first; bounded)."""
    deadline = time.monotonic() + bound
    while True:
        seen = api.exec_inspect(exec_id)
        if not seen.get("Running") or time.monotonic() > deadline:
            return seen.get("ExitCode")
        time.sleep(0.02)
