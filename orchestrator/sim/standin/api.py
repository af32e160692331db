"""The head's OpenAI-compatible HTTP API (uvicorn-like: HTTP/1.1, chunked SSE, access log lines)."""
from __future__ import annotations

import json
import socket
import socketserver
import time
import uuid
import zlib
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import TYPE_CHECKING

from . import answers
from .base import VERSION, Stopped
from .engine import token_id, tokenize
from .shapes import ApiError, Shape, chat_prompt, sampling, usage

if TYPE_CHECKING:
    from .node import Node


ROUTES = [("/openapi.json", "GET, HEAD"), ("/docs", "GET, HEAD"), ("/health", "GET"),
          ("/version", "GET"), ("/tokenize", "POST"), ("/v1/models", "GET"),
          ("/v1/chat/completions", "POST"), ("/v1/completions", "POST"), ("/metrics", "GET")]


QUICKACK = getattr(socket, "TCP_QUICKACK", None)  # Linux


def dumps(obj) -> str:
    """JSON as vLLM sends it (Starlette's JSONResponse, pydantic's model_dump_json): compact, UTF-8."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


class ApiServer(ThreadingHTTPServer):
    """ThreadingHTTPServer without the reverse-DNS lookup HTTPServer.server_bind does (getfqdn)."""

    daemon_threads = True

    def server_bind(self) -> None:
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = self.server_address[:2]


class Handler(BaseHTTPRequestHandler):
    """The head's OpenAI-compatible API (uvicorn-like: HTTP/1.1, chunked SSE, access log lines)."""

    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # TCP_NODELAY: a small answer is not held ~40 ms for a delayed ACK
    server_version = "uvicorn"
    sys_version = ""

    @property
    def app(self) -> "Node":
        return self.server.app  # type: ignore[attr-defined]

    def log_message(self, *a) -> None:
        pass

    def log_request(self, code="-", size="-") -> None:
        code = int(code)
        phrase = self.responses.get(code, ("",))[0]
        host, port = self.client_address[:2]
        self.app.log.uvicorn(f'{host}:{port} - "{self.command} {self.path} HTTP/1.1" {code} {phrase}')

    def _send(self, status: int, body: bytes, ctype: str | None = "application/json") -> None:
        """Status line, headers and body in one write (one segment for a small answer)."""
        self.send_response(status)
        if ctype:
            self.send_header("content-type", ctype)
        self.send_header("content-length", str(len(body)))
        self._headers_buffer.append(b"\r\n" + body)
        self.flush_headers()

    def _json(self, status: int, obj) -> None:
        self._send(status, dumps(obj).encode())

    def _body(self) -> dict:
        length = int(self.headers.get("content-length") or 0)
        if length and QUICKACK is not None and self.app.engine.truth.quickack:
            # SIM_QUICKACK=1: ACK the headers now. Off by default, as in uvicorn: a client that sends its
            # body in a second small write with Nagle on (no TCP_NODELAY) waits for that ACK, which the
            # kernel delays ~40 ms on a reused connection; http.client (one write) and httpx (NODELAY) do not
            self.connection.setsockopt(socket.IPPROTO_TCP, QUICKACK, 1)
        try:
            body = json.loads(self.rfile.read(length) or b"{}")
        except ValueError:
            raise ApiError(400, "Invalid JSON body") from None
        if not isinstance(body, dict):
            raise ApiError(400, "Request body must be a JSON object")
        return body

    def do_GET(self) -> None:
        self._dispatch({"/health": self.get_health, "/v1/models": self.get_models,
                        "/metrics": self.get_metrics, "/version": self.get_version})

    def do_POST(self) -> None:
        self._dispatch({"/v1/completions": self.post_completions, "/v1/chat/completions": self.post_chat,
                        "/tokenize": self.post_tokenize})

    def _dispatch(self, table) -> None:
        route = self.path.split("?", 1)[0]
        fn = table.get(route)
        if fn is None:
            known = {r for r, _ in ROUTES}
            return self._json(405 if route in known else 404,
                              {"detail": "Method Not Allowed" if route in known else "Not Found"})
        try:
            fn()
        except ApiError as err:
            self._json(err.status, err.body)
        except Stopped:
            self.close_connection = True
        except (BrokenPipeError, ConnectionResetError):
            self.close_connection = True
        except Exception as exc:  # a bug in the stand-in: say so in the log, as uvicorn would
            self.app.log.info("APIServer", "httptools_impl.py:414", f"Exception in ASGI application: {exc!r}", "ERROR")
            self.close_connection = True

    def get_health(self) -> None:
        self._send(503 if self.app.engine.dead else 200, b"", None)

    def get_version(self) -> None:
        self._json(200, {"version": VERSION})

    def get_models(self) -> None:
        app, now = self.app, int(time.time())
        self._json(200, {"object": "list", "data": [{
            "id": app.args.served_name, "object": "model", "created": now, "owned_by": "vllm",
            "root": app.args.model, "parent": None, "max_model_len": app.max_model_len,
            "permission": [{"id": f"modelperm-{uuid.uuid4().hex}", "object": "model_permission",
                            "created": now, "allow_create_engine": False, "allow_sampling": True,
                            "allow_logprobs": True, "allow_search_indices": False, "allow_view": True,
                            "allow_fine_tuning": False, "organization": "*", "group": None,
                            "is_blocking": False}]}]})

    def get_metrics(self) -> None:
        self._send(200, self.app.engine.metrics.render().encode(), "text/plain; version=0.0.4; charset=utf-8")

    def post_tokenize(self) -> None:
        """vLLM's /tokenize: {"prompt": str} or {"messages": [...]} (chat template applied)."""
        body = self._body()
        self._check_model(body)
        if "messages" in body:
            prompt = chat_prompt(body["messages"], body.get("add_generation_prompt", True) is not False)
        else:
            prompt = body.get("prompt")
            if not isinstance(prompt, str):
                raise ApiError(400, "'prompt' must be a string")
        toks = tokenize(prompt)
        self._json(200, {"count": len(toks), "max_model_len": self.app.max_model_len,
                         "tokens": [token_id(t) for t in toks],
                         "token_strs": toks if body.get("return_token_strs") else None})

    def _check_model(self, body: dict) -> None:
        name = body.get("model")
        if name is not None and name != self.app.args.served_name:
            raise ApiError(404, f"The model `{name}` does not exist.", "NotFoundError", "model")

    def post_completions(self) -> None:
        body = self._body()
        self._check_model(body)
        prompt = body.get("prompt")
        if isinstance(prompt, list) and len(prompt) == 1 and isinstance(prompt[0], str):
            prompt = prompt[0]
        if not isinstance(prompt, str):
            raise ApiError(400, "'prompt' must be a string (or a list with one string)")
        self._generate(Shape(False, self.app.args.served_name), prompt, body, 16)

    def post_chat(self) -> None:
        body = self._body()
        self._check_model(body)
        prompt = chat_prompt(body.get("messages"))
        self._generate(Shape(True, self.app.args.served_name), prompt, body, None)

    def _generate(self, shape: Shape, prompt: str, body: dict, default_max: int | None) -> None:
        engine, limit = self.app.engine, self.app.max_model_len
        n_prompt = len(tokenize(prompt))
        max_tokens, ignore_eos, include_usage = sampling(body, default_max or max(limit - n_prompt, 1))
        if n_prompt + max_tokens > limit:
            raise ApiError(400, f"This model's maximum context length is {limit} tokens. However, you "
                                f"requested {n_prompt + max_tokens} tokens ({n_prompt} in the messages, "
                                f"{max_tokens} in the completion). Please reduce the length of the "
                                "messages or completion.")
        try:
            answer = answers.plan(prompt, body, shape.chat, engine.features, engine.faults,
                                  zlib.crc32(prompt.encode()))
        except answers.ToolChoiceError as exc:
            raise ApiError(400, str(exc)) from None
        req = engine.prepare(prompt)
        tokens, finished = engine.output_tokens(req, max_tokens, ignore_eos, answer.pieces)
        # the engine finished on a stop either way; the serving layer names a parsed call `tool_calls`
        reason = "tool_calls" if answer.finish == "tool_calls" and finished == "stop" else finished
        use = usage(n_prompt, len(tokens), req["cached"], bool(self.app.args.enable_prompt_tokens_details))
        steps = engine.steps(req, tokens, finished)
        try:
            if body.get("stream"):
                self._stream(shape, steps, len(tokens), reason, use if include_usage else None)
            else:
                text = "".join(t for group in steps for t in group)
                self._json(200, shape.body(text, reason, use, self._extra(shape, body, tokens, answer)))
        finally:
            steps.close()  # frees the batch slot (counted as abort) when the client went away

    def _extra(self, shape: Shape, body: dict, tokens: list[str], answer: answers.Plan) -> dict:
        """What a non-streamed answer carries besides its text: logprobs, tool calls, reasoning."""
        faults, extra = self.app.engine.faults, {}
        shown = [t for t in tokens if t]
        top = body.get("top_logprobs") or 0
        if shape.chat and body.get("logprobs"):
            extra["logprobs"] = answers.chat_logprobs(shown, int(top), faults)
        elif not shape.chat and body.get("logprobs") is not None:
            extra["logprobs"] = answers.completion_logprobs(shown, int(body["logprobs"]), faults)
        if answer.tool_call:
            extra["tool_calls"] = answers.tool_calls(answer.tool_call)
        if answer.reasoning:
            extra["reasoning"] = answer.reasoning
            extra["reasoning_inline"] = faults.reasoning_inline
        return extra

    def _stream(self, shape: Shape, steps, total: int, reason: str, use: dict | None) -> None:
        self.send_response(200)
        self.send_header("content-type", "text/event-stream; charset=utf-8")
        self.send_header("transfer-encoding", "chunked")
        self.end_headers()

        def chunk(obj) -> None:
            raw = ("data: " + (obj if isinstance(obj, str) else dumps(obj)) + "\n\n").encode()
            self.wfile.write(b"%x\r\n%s\r\n" % (len(raw), raw))

        sent = 0
        for group in steps:
            if not sent:
                for opening in shape.opening():
                    chunk(opening)
            sent += len(group)
            chunk(shape.chunk("".join(group), reason if sent >= total else None))
        if use is not None:
            chunk(shape.usage_chunk(use))
        chunk("[DONE]")
        self.wfile.write(b"0\r\n\r\n")
