"""OpenAI-compatible request parsing and response shapes, as vLLM's serving layer produces them.

Streamed chunks are what vLLM's pydantic models dump with exclude_unset: a completion chunk's choice
carries index/text/logprobs/finish_reason/stop_reason; a chat chunk's choice index/delta/logprobs/
finish_reason (plus stop_reason on the last one). The chat stream opens with a role chunk
(`delta: {"role": "assistant", "content": ""}`) sent when the first output is ready (so it arrives with
the first content chunk, not before the prefill); the finish reason rides on the last content chunk;
with `stream_options.include_usage` a chunk with `choices: []` and the usage follows; then `[DONE]`.
"""
from __future__ import annotations

import time
import uuid


class ApiError(Exception):
    def __init__(self, status: int, message: str, kind: str = "BadRequestError", param=None):
        super().__init__(message)
        self.status, self.body = status, {"error": {"message": message, "type": kind, "param": param,
                                                    "code": status}}


def chat_prompt(messages, add_generation_prompt: bool = True) -> str:
    """The stand-in's chat template: `<|role|>\\ncontent\\n` per message, then `<|assistant|>\\n`."""
    if not isinstance(messages, list) or not messages:
        raise ApiError(400, "'messages' must be a non-empty list")
    parts = []
    for msg in messages:
        if not isinstance(msg, dict) or not isinstance(msg.get("role"), str):
            raise ApiError(400, "each message must be an object with a 'role'")
        content = msg.get("content") or ""
        if isinstance(content, list):  # [{"type": "text", "text": ...}, ...]
            content = "".join(p.get("text", "") for p in content if isinstance(p, dict) and p.get("type") == "text")
        if not isinstance(content, str):
            raise ApiError(400, "message content must be a string or a list of text parts")
        parts.append(f"<|{msg['role']}|>\n{content}\n")
    if add_generation_prompt:
        parts.append("<|assistant|>\n")
    return "".join(parts)


def sampling(body: dict, default_max: int) -> tuple[int, bool, bool]:
    """(max_tokens, ignore_eos, include_usage) from a request body, checked the way vLLM does."""
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is None:
        max_tokens = default_max
    if not isinstance(max_tokens, int) or isinstance(max_tokens, bool) or max_tokens < 1:
        raise ApiError(400, "max_tokens must be at least 1, got " + repr(max_tokens))
    temperature = body.get("temperature")
    if temperature is not None and (not isinstance(temperature, (int, float)) or temperature < 0):
        raise ApiError(400, f"temperature must be non-negative, got {temperature}.")
    options = body.get("stream_options")
    if options is not None and not body.get("stream"):
        raise ApiError(400, "Stream options can only be defined when `stream=True`.")
    return max_tokens, bool(body.get("ignore_eos")), bool((options or {}).get("include_usage"))


def usage(prompt_tokens: int, completion_tokens: int, cached: int, details: bool) -> dict:
    """vLLM's UsageInfo: prompt_tokens_details is null unless the server runs with
    --enable-prompt-tokens-details AND the prefix cache served some of the prompt (serving_completion.py:
    `if self.enable_prompt_tokens_details and num_cached_tokens`). A client that needs freshness must not
    read a missing field as 0: the prefix_cache_hits counter in /metrics answers either way."""
    return {"prompt_tokens": prompt_tokens, "total_tokens": prompt_tokens + completion_tokens,
            "completion_tokens": completion_tokens,
            "prompt_tokens_details": {"cached_tokens": cached} if details and cached else None}


class Shape:
    """One response's framing: completion (`cmpl-`, text_completion) or chat (`chatcmpl-`)."""

    def __init__(self, chat: bool, model: str):
        self.chat = chat
        self.head = {"id": f"{'chatcmpl' if chat else 'cmpl'}-{uuid.uuid4().hex}",
                     "object": "chat.completion.chunk" if chat else "text_completion",
                     "created": int(time.time()), "model": model}

    def opening(self) -> list[dict]:
        """Chunks sent before the first content chunk: the chat role chunk."""
        if not self.chat:
            return []
        return [{**self.head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""},
                                           "logprobs": None, "finish_reason": None}]}]

    def chunk(self, text: str, finish: str | None) -> dict:
        if self.chat:
            choice = {"index": 0, "delta": {"content": text}, "logprobs": None, "finish_reason": finish}
            if finish is not None:
                choice["stop_reason"] = None
        else:
            choice = {"index": 0, "text": text, "logprobs": None, "finish_reason": finish, "stop_reason": None}
        return {**self.head, "choices": [choice]}

    def usage_chunk(self, use: dict) -> dict:
        return {**self.head, "choices": [], "usage": use}

    def body(self, text: str, finish: str, use: dict, extra: dict | None = None) -> dict:
        """The non-streamed answer; `extra` (api._extra): logprobs, tool_calls, reasoning."""
        extra = extra or {}
        logprobs = extra.get("logprobs")
        if not self.chat:
            return {**self.head, "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish,
                                              "stop_reason": None, "prompt_logprobs": None}], "usage": use}
        calls, reasoning = extra.get("tool_calls") or [], extra.get("reasoning")
        if reasoning and extra.get("reasoning_inline"):  # no parser split it: the thinking stays in content
            text, reasoning = f"<think>{reasoning}</think>{text}", None
        message = {"role": "assistant", "content": None if calls else text, "refusal": None, "annotations": None,
                   "audio": None, "function_call": None, "tool_calls": calls, "reasoning_content": reasoning}
        return {**self.head, "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "logprobs": logprobs, "finish_reason": finish,
                             "stop_reason": None}],
                "service_tier": None, "system_fingerprint": None, "usage": use, "prompt_logprobs": None,
                "kv_transfer_params": None}
