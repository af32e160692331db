"""What the stand-in answers beyond its greedy filler, so acceptance checks have something real to judge.

A model's answers are not simulated; these rules give each acceptance check (orchestrator/acceptance) a
server that passes it when healthy and fails it under the matching fault, as the field saw models fail:
  - logprobs: finite, derived from each token (SIM_FAULT_LOGPROBS_NAN=1: NaN, an output gone bad);
  - a needle: `The <words> is <value>.` in the prompt and a last line `What is the <words>?` is answered
    `The <words> is <value>.` (SIM_FAULT_FORGET_BEYOND=N: only the last N prompt tokens are seen);
  - tools: with --enable-auto-tool-choice and --tool-call-parser, a request with `tools` calls the first
    tool, its arguments `name="value"` pairs read from the last user message; a `tool` message is answered
    `The result is: <content>` (SIM_FAULT_TOOL_PLAIN=1: the call comes back as plain text in content);
  - language: `zh-Hant` / `繁體中文` in the prompt answers in Traditional characters (SIM_FAULT_SIMPLIFIED=1:
    Simplified ones slip in);
  - reasoning: with --reasoning-parser, a chat answer's thinking goes to `reasoning_content` (non-streamed;
    SIM_FAULT_REASONING_INLINE=1: `<think>...</think>` stays in content);
  - greedy output depends on the prompt only (SIM_FAULT_PERTURB=1 changes it, as a numerics change would).
"""
from __future__ import annotations

import json
import re
import uuid
import zlib
from dataclasses import dataclass, field

CJK = "\u3040-\u30ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff\uac00-\ud7af"
PIECE_RE = re.compile(rf"\s*(?:[{CJK}]|[^\s{CJK}]+)")
TOKEN_RE = re.compile(rf"[{CJK}]|[^\W{CJK}]+|[^\w\s]")  # engine.tokenize's
NEEDLE_Q = re.compile(r"What is the ([\w ]+?)\?\s*$")
HANT_ASK = re.compile(r"zh-Hant|繁體中文|繁体中文")
# Traditional forms of common characters, and the Simplified forms SIM_FAULT_SIMPLIFIED lets slip in
HANT = list("這是們個會來對學國產動時為說們從開關點經過還當與發問題電話認識歡邊後應該讓")
HANS = list("这们个会来对学国产动时为说从开关点经过还当与发问题电话认识欢边后应该让")
THINK = "Let me think about the question step by step."
TOOL_ARG = re.compile(r'(\w+)="([^"]*)"')


@dataclass(frozen=True)
class Faults:
    logprobs_nan: bool = False
    forget_beyond: int = 0
    tool_plain: bool = False
    simplified: bool = False
    reasoning_inline: bool = False
    perturb: bool = False

    @classmethod
    def from_env(cls, env) -> "Faults":
        return cls(env.get("SIM_FAULT_LOGPROBS_NAN") == "1", int(env.get("SIM_FAULT_FORGET_BEYOND") or 0),
                   env.get("SIM_FAULT_TOOL_PLAIN") == "1", env.get("SIM_FAULT_SIMPLIFIED") == "1",
                   env.get("SIM_FAULT_REASONING_INLINE") == "1", env.get("SIM_FAULT_PERTURB") == "1")


@dataclass(frozen=True)
class Features:
    """What the server's flags switch on."""

    tool_parser: str | None = None
    auto_tool_choice: bool = False
    reasoning_parser: str | None = None

    @classmethod
    def from_args(cls, args) -> "Features":
        return cls(getattr(args, "tool_call_parser", None) or None, bool(getattr(args, "enable_auto_tool_choice", False)),
                   getattr(args, "reasoning_parser", None) or None)


@dataclass
class Plan:
    """One request's answer: the text pieces to pace out, and what the response carries besides."""

    pieces: list[str] | None = None  # None: the engine's greedy filler
    tool_call: dict | None = None  # {"name":..., "arguments": json string}
    reasoning: str | None = None
    finish: str | None = None  # overrides the engine's reason
    extras: dict = field(default_factory=dict)


class ToolChoiceError(ValueError):
    """vLLM's 400 for `tool_choice: auto` without the flags."""


def pieces(text: str) -> list[str]:
    return PIECE_RE.findall(text)


def salt(digest: int, faults: Faults) -> int:
    """The greedy output's seed: the prompt's digest, changed only by the perturbing fault."""
    return digest ^ 0x5EED5EED if faults.perturb else digest


def needle(prompt: str, faults: Faults) -> str | None:
    question = NEEDLE_Q.search(prompt.replace("<|assistant|>", "").rstrip())
    if not question:
        return None
    words, seen = question.group(1), prompt
    if faults.forget_beyond:  # attention reaches only the last N tokens (the tokenizer's: engine.TOKEN_RE)
        starts = [m.start() for m in TOKEN_RE.finditer(prompt)]
        if len(starts) > faults.forget_beyond:
            seen = prompt[starts[-faults.forget_beyond]:]
    found = re.search(rf"The {re.escape(words)} is ([^\s]+?)\.(?:\s|$)", seen)
    return f"The {words} is {found.group(1)}." if found else None


def traditional(prompt: str, faults: Faults, digest: int, n: int) -> str | None:
    if not HANT_ASK.search(prompt):
        return None
    text = []
    for i in range(max(n, 1)):
        pick = (digest >> (i % 48)) + i * 7
        text.append(HANS[pick % len(HANS)] if faults.simplified and i % 3 == 1 else HANT[pick % len(HANT)])
    return "".join(text)


def plan(prompt: str, body: dict, chat: bool, features: Features, faults: Faults, digest: int) -> Plan:
    """The answer for this request, or an empty Plan (the greedy filler)."""
    tools = body.get("tools") if chat else None
    choice = body.get("tool_choice", "auto" if tools else None)
    messages = body.get("messages") or []
    if tools and choice not in (None, "none"):
        if choice == "auto" and not (features.auto_tool_choice and features.tool_parser):
            raise ToolChoiceError('"auto" tool choice requires --enable-auto-tool-choice and --tool-call-parser '
                                  "to be set")
        last = messages[-1] if messages else {}
        if last.get("role") != "tool":
            return _tool_plan(tools, messages, faults)
    if chat and messages and messages[-1].get("role") == "tool":
        return Plan(pieces(f"The result is: {messages[-1].get('content') or ''}"), finish="stop")
    limit = body.get("max_completion_tokens", body.get("max_tokens")) or 64
    text = needle(prompt, faults) or traditional(prompt, faults, digest, min(int(limit), 24))
    result = Plan(pieces(text), finish="stop") if text else Plan()
    if chat and features.reasoning_parser:
        result.reasoning = THINK
    return result


def _tool_plan(tools: list, messages: list, faults: Faults) -> Plan:
    fn = (tools[0] or {}).get("function") or {}
    name = fn.get("name", "")
    wanted = set(((fn.get("parameters") or {}).get("properties") or {}).keys())
    users = [m for m in messages if m.get("role") == "user"]
    said = users[-1].get("content") if users else ""
    args = {k: v for k, v in TOOL_ARG.findall(said if isinstance(said, str) else "") if not wanted or k in wanted}
    arguments = json.dumps(args, ensure_ascii=False)
    if faults.tool_plain:
        raw = f'<tool_call>{{"name": "{name}", "arguments": {arguments}}}</tool_call>'
        return Plan(pieces(raw), finish="stop")
    return Plan([], tool_call={"name": name, "arguments": arguments}, finish="tool_calls")


def logprob(token: str, position: int, faults: Faults) -> float:
    if faults.logprobs_nan:
        return float("nan")
    return -((zlib.crc32(f"{position}:{token}".encode()) % 2000) / 1000.0)


def completion_logprobs(tokens: list[str], top: int, faults: Faults) -> dict:
    """The legacy completions shape: tokens, token_logprobs, top_logprobs, text_offset."""
    offsets, at = [], 0
    for t in tokens:
        offsets.append(at)
        at += len(t)
    values = [logprob(t, i, faults) for i, t in enumerate(tokens)]
    return {"text_offset": offsets, "token_logprobs": values, "tokens": tokens,
            "top_logprobs": [{t: v} for t, v in zip(tokens, values)] if top else None}


def chat_logprobs(tokens: list[str], top: int, faults: Faults) -> dict:
    """The chat shape: content = [{token, logprob, bytes, top_logprobs}]."""
    out = []
    for i, t in enumerate(tokens):
        v = logprob(t, i, faults)
        out.append({"token": t, "logprob": v, "bytes": list(t.encode()),
                    "top_logprobs": [{"token": t, "logprob": v, "bytes": list(t.encode())}][:top]})
    return {"content": out}


def tool_calls(call: dict | None) -> list[dict]:
    if not call:
        return []
    return [{"id": f"chatcmpl-tool-{uuid.uuid4().hex[:24]}", "type": "function", "function": call}]
