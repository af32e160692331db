"""`accept` against a broken endpoint: a real HTTP server on 127.0.0.1 (stdlib, in a thread) answers binary
bytes or JSON of the wrong shape; the CLI's output holds no control character, says what was wrong, and
every check reports (the release is found on the in-memory cluster; only the API is this server)."""
from __future__ import annotations

import json
import re
import socketserver
import threading
from functools import partial
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
from typer.testing import CliRunner

from orchestrator.acceptance import command as accept_command
from orchestrator.cli import accept_cmd
from orchestrator.cli.main import app
from orchestrator.http_api.endpoint import Endpoint

from memnode.harness import MemCluster
from memnode.node import connector

CHECKS = ["logprobs-finite", "greedy-digest", "needle", "tool-call", "language", "thinking"]
BINARY = b"\x1b[2J\x1b]0;owned\x07" + bytes(range(256))
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f]")
WRONG_SHAPES = {
    "numbers": {"choices": [{"text": 12, "logprobs": {"token_logprobs": ["NaN", None]},
                             "message": {"content": 12, "tool_calls": "get_weather", "reasoning": 7}}]},
    "nulls": {"choices": [{"text": None, "logprobs": "NaN", "message": None}]},
    "missing keys": {"choices": [{}]},
    "choices not a list": {"choices": "x"},
    "a list": [1, 2],
}


def serve(handler_body):
    """A server answering every POST with handler_body() -> bytes; returns (server, port)."""
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            body = handler_body()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server, server.server_address[1]


class RawBinary(socketserver.BaseRequestHandler):
    """Not HTTP at all: binary bytes for any request."""

    def handle(self):
        self.request.recv(65536)
        self.request.sendall(BINARY)


@pytest.fixture
def mem(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    cluster = MemCluster(tmp_path)
    flags = {"tool-call-parser": "hermes", "enable-auto-tool-choice": True, "reasoning-parser": "qwen3"}
    cluster.up(cluster.deployment(lambda r: r["vllm"]["extra"].update(flags)), accept=False)
    return cluster


def run_cli(mem, monkeypatch, port: int):
    seams = partial(accept_command.accept, connector=connector(mem.world),
                    endpoint_at=lambda _host, _port: Endpoint("127.0.0.1", port))
    monkeypatch.setattr(accept_cmd, "run_accept", seams)
    argv = ["accept", "-i", str(mem.dep.inventory_path)] + [a for c in CHECKS for a in ("--check", c)]
    return CliRunner().invoke(app, argv)


def assert_every_check_failed_cleanly(result) -> str:
    text = result.output
    assert result.exit_code == 1, text
    assert not CONTROL.findall(text), CONTROL.findall(text)
    assert "unexpected" not in text and "Error" not in text.replace("HTTPException", ""), text
    for name in CHECKS:
        assert re.search(rf"^fail {re.escape(name)}: ", text, re.M), (name, text)
    assert "NOT accepted" in text
    return text


def test_binary_bytes_answered_are_shown_escaped_and_called_not_json(mem, monkeypatch):
    server, port = serve(lambda: BINARY)
    try:
        text = assert_every_check_failed_cleanly(run_cli(mem, monkeypatch, port))
    finally:
        server.shutdown()
    assert "the answer is not JSON: '" in text and "\\x1b[2J" in text


def test_an_answer_that_is_not_http_is_said_so(mem, monkeypatch):
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), RawBinary)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        text = assert_every_check_failed_cleanly(run_cli(mem, monkeypatch, server.server_address[1]))
    finally:
        server.shutdown()
    assert "not an HTTP answer" in text


@pytest.mark.parametrize("shape", list(WRONG_SHAPES))
def test_json_of_the_wrong_shape_fails_each_check_naming_the_field(mem, monkeypatch, shape):
    server, port = serve(lambda: json.dumps(WRONG_SHAPES[shape]).encode())
    try:
        text = assert_every_check_failed_cleanly(run_cli(mem, monkeypatch, port))
    finally:
        server.shutdown()
    if shape == "numbers":
        assert "choices[0].text is 12, not a string" in text  # greedy-digest, needle
        assert "2 of 2 logprobs not finite ('NaN' at 0, None at 1)" in text
        assert "choices[0].message.content is 12, not a string" in text  # tool-call, language, thinking
    if shape == "nulls":
        assert "no choices[0].logprobs.token_logprobs list" in text
    if shape == "a list":
        assert "the answer is JSON but a list, not an object" in text
    if shape == "choices not a list":
        assert "choices is 'x', not a list of objects" in text
