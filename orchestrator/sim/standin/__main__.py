"""`python3 -m orchestrator.sim.standin serve ...`: parse like vLLM, then run one rank under the supervisor."""
from __future__ import annotations

import argparse
import os
import signal
import sys

from .base import SimError, Stopped
from .cli import parse_cli
from .config import ENGINE_FRAMES
from .node import Node
from .supervisor import oom_fault_applies, oom_limit_bytes, supervise


def serve_forever(args: argparse.Namespace) -> None:
    """The server process: run one rank until a signal or a failure, then exit with its code."""
    node = Node(args)
    signal.signal(signal.SIGTERM, node.on_signal)
    signal.signal(signal.SIGINT, node.on_signal)
    signal.signal(signal.SIGUSR1, node.on_stall)
    code = 0
    try:
        node.run()
    except Stopped:
        code = node.life.code
    except SimError as err:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        if err.final:
            proc = "APIServer" if node.head else None
            node.log.traceback(proc, err.final, ENGINE_FRAMES[:2] + tuple(err.frames))
        code = err.code
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        node.life.stop.set()
        node.cleanup()
    sys.stdout.flush()
    os._exit(code)


def main(argv: list[str] | None = None) -> None:
    args = parse_cli(sys.argv[1:] if argv is None else argv)  # bad flags: exit 2 before any fork
    env = os.environ
    watch = oom_fault_applies(env, args.node_rank)
    limit = oom_limit_bytes(env) if watch else 0
    os._exit(supervise(lambda: serve_forever(args), watch, limit))


if __name__ == "__main__":
    main()
