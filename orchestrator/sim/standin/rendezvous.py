"""A TCPStore-like rendezvous between ranks; its connections double as liveness links."""
from __future__ import annotations

import json
import socket
import threading
import time

from .base import Life, SimError


class Rendezvous:
    """A TCPStore-like rendezvous: rank 0 hosts it on master-port, others join and stay connected.

    The open connections double as liveness links: EOF on the head means a peer died (the head
    then stalls and repeats the ring-buffer message); EOF on a peer means the head is gone.
    """

    def __init__(self, args, timeout: float, life: Life):
        self.args, self.timeout, self.life = args, timeout, life
        self.conns: list[socket.socket] = []
        self.ready_peers = 0
        self.ready_cond = threading.Condition()

    def listen(self) -> socket.socket:
        srv = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            srv.bind(("0.0.0.0", self.args.master_port))
        except OSError:
            raise SimError(
                "torch.distributed.DistNetworkError: The server socket has failed to listen on any local "
                f"network address. port: {self.args.master_port}, useIpv6: false, code: -98, name: "
                "EADDRINUSE, message: address already in use") from None
        srv.listen(16)
        return srv

    def host(self, srv: socket.socket) -> None:
        """Rank 0: wait for nnodes-1 valid hellos, then release everyone at once (a barrier).

        Each connection is greeted in its own thread, so a port probe that never says hello
        cannot hold up the real peers (torch's TCPStore serves clients concurrently too).
        """
        nnodes, joined, cond = self.args.nnodes, {}, threading.Condition()

        def greet(conn: socket.socket) -> None:
            conn.settimeout(self.timeout)
            try:
                hello = json.loads(conn.makefile("r").readline() or "{}")
            except (OSError, ValueError):
                hello = {}
            rank = hello.get("rank")
            with cond:
                ok = (hello.get("world") == nnodes and isinstance(rank, int) and 0 < rank < nnodes
                      and rank not in joined)
                if ok:
                    joined[rank] = conn
                    cond.notify_all()
            if not ok:
                conn.close()

        def accept_loop() -> None:
            while True:
                try:
                    conn, _ = srv.accept()
                except OSError:
                    return  # listener shut down
                threading.Thread(target=greet, args=(conn,), daemon=True).start()

        threading.Thread(target=accept_loop, name="rdzv-accept", daemon=True).start()
        with cond:
            done = cond.wait_for(lambda: len(joined) >= nnodes - 1, timeout=self.timeout)
            self.conns = list(joined.values())
        srv.shutdown(socket.SHUT_RDWR)  # wakes the blocked accept()
        srv.close()
        if not done:
            raise SimError(f"torch.distributed.DistStoreError: Timed out after {int(self.timeout) + 1} "
                           f"seconds waiting for clients. {1 + len(self.conns)}/{nnodes} clients joined.")
        for conn in self.conns:
            conn.settimeout(None)
            try:
                conn.sendall(b"GO\n")
            except OSError:
                pass  # that peer already died: its watcher reports it

    def join(self) -> None:
        """Rank > 0: connect (retrying while refused, like torch's store client) and await GO."""
        addr = (self.args.master_addr, self.args.master_port)
        deadline = time.monotonic() + self.timeout
        while True:
            try:
                conn = socket.create_connection(addr, timeout=max(0.05, deadline - time.monotonic()))
                break
            except OSError:
                if time.monotonic() >= deadline:
                    raise SimError(
                        "torch.distributed.DistNetworkError: The client socket has timed out after "
                        f"{int(self.timeout * 1000)}ms while trying to connect to {addr}.") from None
                self.life.sleep(0.1)
        conn.sendall(json.dumps({"rank": self.args.node_rank, "world": self.args.nnodes}).encode() + b"\n")
        conn.settimeout(max(0.05, deadline - time.monotonic()))
        try:
            ok = conn.makefile("rb").readline() == b"GO\n"
        except OSError:
            ok = False
        if not ok:
            raise SimError("torch.distributed.DistStoreError: Timed out after "
                           f"{int(self.timeout) + 1} seconds waiting for the store at {addr[0]}:{addr[1]} "
                           "(connection closed by the server or barrier not released).")
        conn.settimeout(None)
        self.conns.append(conn)

    def report_ready(self) -> None:
        """Rank > 0: tell the head this worker finished profiling and warm-up."""
        for conn in self.conns:
            try:
                conn.sendall(b"READY\n")
            except OSError:
                pass

    def wait_peers_ready(self) -> None:
        """Rank 0: the engine serves only once every worker is warmed up (a dead peer keeps it waiting)."""
        with self.ready_cond:
            while self.ready_peers < len(self.conns) and not self.life.stop.is_set():
                self.ready_cond.wait(0.5)

    def watch(self, on_lost) -> None:
        """Call on_lost() once per connection that reaches EOF or errors; count READY messages."""
        def _watch(conn):
            try:
                while data := conn.recv(64):
                    if b"READY" in data:
                        with self.ready_cond:
                            self.ready_peers += 1
                            self.ready_cond.notify_all()
            except OSError:
                pass
            if not self.life.stop.is_set():
                on_lost()
        for conn in self.conns:
            threading.Thread(target=_watch, args=(conn,), name="rdzv-watch", daemon=True).start()


