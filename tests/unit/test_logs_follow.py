"""`logs -f` (deploy/logs.follow): a node's stream that the stop cut short (Ctrl-C closes the connections
under it) ends quietly, and one that fails while following is said as a line naming node and container,
never as a thread's traceback on the terminal."""

from __future__ import annotations

import threading

import pytest

from orchestrator.deploy import logs


class Conn:
    def __init__(self, name: str, lines: list[str], error: Exception | None = None):
        self.name, self.lines, self.error = name, lines, error

    def stream(self, argv, on_line, stop) -> int:
        for line in self.lines:
            on_line(line)
        if self.error is not None:
            raise self.error
        return 0


def follow(nodes, emit, stop: threading.Event) -> None:
    """logs.follow, then every stream thread it started joined (bounded): a thread's end is what is judged."""
    before = set(threading.enumerate())
    logs.follow(None, nodes, None, None, None, emit, stop)
    for thread in set(threading.enumerate()) - before:
        thread.join(10)
        assert not thread.is_alive()


@pytest.fixture
def hooked(monkeypatch):
    seen: list = []
    monkeypatch.setattr(threading, "excepthook", seen.append)
    monkeypatch.setattr(logs, "current", lambda cluster, nodes, recipe: {n.name: [f"sd-{n.name}"] for n in nodes})
    return seen


def test_a_stream_that_fails_while_following_is_a_line_naming_node_and_container(hooked):
    said: list[tuple[str, str]] = []
    nodes = [Conn("spark-1", ["up"]), Conn("spark-2", [], OSError("Channel closed."))]
    follow(nodes, lambda node, line: said.append((node, line)), threading.Event())
    assert ("spark-1", "up") in said
    assert ("spark-2", "[spark-deploy: following sd-spark-2's log failed: Channel closed.]") in said
    assert hooked == []


def test_a_stream_cut_by_the_stop_ends_quietly(hooked):
    said: list[tuple[str, str]] = []
    stop = threading.Event()
    stop.set()  # Ctrl-C: the connections are closed under the streams still starting
    follow([Conn("spark-2", [], OSError("Channel closed."))], lambda node, line: said.append((node, line)), stop)
    assert said == [] and hooked == []
