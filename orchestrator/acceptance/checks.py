"""The built-in acceptance checks (docs/acceptance.md: what each guards against, and the field note)."""
from __future__ import annotations

import hashlib
import json
import re

from .charsets import cjk_count, simplified_only
from .model import AcceptContext, AcceptStatus, Answer, Malformed, Request, Result, finite, shown
from .registry import acceptance

GREEDY_PROMPTS = {"prose": "Two nodes joined by one cable each load half of the weights and",
                  "code": "def add(a, b):\n    return"}
NEEDLE_FACT = "pass phrase"
NEEDLE_VALUE = "violet-4821"
NEEDLE_DEPTH = 0.1  # from the start: the farthest a model must look back
NEEDLE_CAP = 8192
FILLER = "The racks hum along while the fans keep the room cool and the logs roll by."
TOOL = {"type": "function", "function": {
    "name": "get_weather", "description": "The current weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}
TOOL_ASK = 'Call get_weather with city="Taipei".'
TOOL_RESULT = "22 C and sunny"
ZH_HANT_ASK = "請用繁體中文（zh-Hant）回答：今天的天氣怎麼樣？"


def _flag(ctx: AcceptContext, name: str) -> str | None:
    value = ctx.flags.get(name)
    return None if value in (None, False, "") else str(value)


def completion(prompt: str, max_tokens: int, **more) -> dict:
    return {"prompt": prompt, "max_tokens": max_tokens, "temperature": 0, **more}


def chat(messages: list, max_tokens: int, **more) -> dict:
    return {"messages": messages, "max_tokens": max_tokens, "temperature": 0, **more}


def _model(ctx: AcceptContext, body: dict) -> dict:
    return {"model": ctx.model, **body}


def greedy_request(ctx: AcceptContext, prompt: str) -> Request:
    """greedy-digest's request for one prompt, logprobs included: logprobs-finite asks the very same one for
    the prose prompt, so a run sends it once (run.Sender) and the engine decodes one request, not two."""
    return Request("POST", "/v1/completions", _model(ctx, completion(prompt, 16, logprobs=1)))


# ---- logprobs-finite ------------------------------------------------------------------------------------

def judge_logprobs(name: str, answer: Answer) -> Result:
    problem = answer.problem()
    if problem:
        return Result(name, AcceptStatus.FAIL, problem)
    logprobs = answer.choice.get("logprobs")
    values = logprobs.get("token_logprobs") if isinstance(logprobs, dict) else None
    if not isinstance(values, list) or not values:
        return Result(name, AcceptStatus.FAIL, f"no choices[0].logprobs.token_logprobs list in the answer: "
                                               f"{answer.excerpt()}")
    bad = [(i, v) for i, v in enumerate(values) if not finite(v)]
    if bad:
        shown = ", ".join(f"{v!r} at {i}" for i, v in bad[:3])
        return Result(name, AcceptStatus.FAIL, f"{len(bad)} of {len(values)} logprobs not finite ({shown})")
    return Result(name, AcceptStatus.PASS, f"{len(values)} logprobs, all finite (min {min(values):.3f})")


@acceptance("logprobs-finite", "an output gone NaN, which shows nowhere else (field note: NaN logprobs)")
def logprobs_finite(ctx: AcceptContext):
    answer = yield greedy_request(ctx, GREEDY_PROMPTS["prose"])
    return judge_logprobs("logprobs-finite", answer)


# ---- greedy-digest --------------------------------------------------------------------------------------

def digest(outputs: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(outputs, sort_keys=True, ensure_ascii=False).encode()).hexdigest()[:16]


def judge_greedy(name: str, outputs: dict[str, str], previous: dict | None, expect_identical: bool) -> Result:
    """Identical to the previous release of the same model, or the diff shown; FAIL only when the recipe
    expects identity (a real change of argv may change outputs)."""
    data = {"digest": digest(outputs), "outputs": outputs}
    if not previous or not previous.get("outputs"):
        return Result(name, AcceptStatus.PASS, f"digest {data['digest']} (no earlier release of this model to "
                                               "compare with)", data=data)
    before = previous["outputs"]
    where = f"release {previous.get('release')}" if previous.get("release") is not None else "the previous release"
    if before == outputs:
        return Result(name, AcceptStatus.PASS, f"digest {data['digest']} identical to {where}'s", data=data)
    diff = "; ".join(f"{k}: was {before.get(k)!r}, now {outputs.get(k)!r}"
                     for k in sorted(set(before) | set(outputs)) if before.get(k) != outputs.get(k))
    status = AcceptStatus.FAIL if expect_identical else AcceptStatus.CHANGED
    return Result(name, status, f"digest {data['digest']} differs from {where}'s ({previous.get('digest')}): {diff}",
                  data=data)


@acceptance("greedy-digest", "outputs that changed without anyone changing the model (a vocabulary swap "
                             "verified byte-identical at T=0 in the field notes)")
def greedy_digest(ctx: AcceptContext):
    # both prompts at once: independent, so the engine batches them (one request's time, not two)
    answers = yield [greedy_request(ctx, prompt) for prompt in GREEDY_PROMPTS.values()]
    outputs = {}
    for key, answer in zip(GREEDY_PROMPTS, answers):
        problem = answer.problem()
        if problem:
            return Result("greedy-digest", AcceptStatus.FAIL, f"{key}: {problem}")
        outputs[key] = answer.text_of("text")
    return judge_greedy("greedy-digest", outputs, ctx.previous, ctx.settings.expect_identical)


# ---- needle ---------------------------------------------------------------------------------------------

def needle_tokens(ctx: AcceptContext) -> int:
    """The haystack's size in (whitespace) words: the recipe's, or a quarter of max_model_len, capped."""
    if ctx.settings.needle_tokens:
        return min(ctx.settings.needle_tokens, max(ctx.max_model_len - 128, 64))
    return max(64, min(ctx.max_model_len // 4, NEEDLE_CAP))


def haystack(words: int, depth: float = NEEDLE_DEPTH) -> str:
    per = len(FILLER.split())
    sentences = [FILLER] * max(words // per, 2)
    sentences.insert(int(len(sentences) * depth), f"The {NEEDLE_FACT} is {NEEDLE_VALUE}.")
    return " ".join(sentences) + f"\nWhat is the {NEEDLE_FACT}?"


def judge_needle(name: str, answer: Answer, words: int) -> Result:
    problem = answer.problem()
    if problem:
        return Result(name, AcceptStatus.FAIL, f"{words}-word prompt: {problem}")
    text = answer.text_of("text")
    if NEEDLE_VALUE in text:
        return Result(name, AcceptStatus.PASS, f"retrieved {NEEDLE_VALUE!r} planted at {NEEDLE_DEPTH:.0%} of a "
                                               f"{words}-word prompt")
    return Result(name, AcceptStatus.FAIL, f"{NEEDLE_VALUE!r} planted at {NEEDLE_DEPTH:.0%} of a {words}-word "
                                           f"prompt was not retrieved: answered {text[:80]!r}")


@acceptance("needle", "a long context the engine does not really attend to (a 26K needle in the field notes)")
def needle(ctx: AcceptContext):
    words = needle_tokens(ctx)
    answer = yield Request("POST", "/v1/completions", _model(ctx, completion(haystack(words), 16)), timeout=120)
    return judge_needle("needle", answer, words)


# ---- tool-call ------------------------------------------------------------------------------------------

def _no_tool_parser(ctx: AcceptContext) -> str | None:
    if not _flag(ctx, "tool-call-parser"):
        return "no tool parser configured (vllm.extra tool-call-parser)"
    if not _flag(ctx, "enable-auto-tool-choice"):
        return "tool-call-parser is set but enable-auto-tool-choice is not"
    return None


def judge_tool_call(name: str, answer: Answer) -> tuple[Result, dict | None]:
    problem = answer.problem()
    if problem:
        return Result(name, AcceptStatus.FAIL, problem), None
    calls = answer.message.get("tool_calls") or []
    content = answer.text_of("content")
    if not isinstance(calls, list) or not all(isinstance(c, dict) for c in calls):
        raise Malformed(f"choices[0].message.tool_calls is {shown(calls)}, not a list of objects")
    if not calls:
        plain = " as plain text" if re.search(r"get_weather|tool_call|\"name\"", content) else ""
        return Result(name, AcceptStatus.FAIL, f"no tool call parsed: the call came back{plain} in content "
                                               f"{content[:100]!r}"), None
    fn = calls[0].get("function") or {}
    if not isinstance(fn, dict):
        raise Malformed(f"choices[0].message.tool_calls[0].function is {shown(fn)}, not an object")
    if not isinstance(fn.get("arguments") or "", str):
        raise Malformed(f"tool_calls[0].function.arguments is {shown(fn.get('arguments'))}, not a string")
    try:
        args = json.loads(fn.get("arguments") or "")
    except ValueError:
        return Result(name, AcceptStatus.FAIL, f"arguments are not JSON: {fn.get('arguments')!r}"), None
    if fn.get("name") != "get_weather" or not isinstance(args, dict) or args.get("city") != "Taipei":
        return Result(name, AcceptStatus.FAIL, f"called {fn.get('name')!r} with {args!r}, not get_weather(city="
                                               "'Taipei')"), None
    return Result(name, AcceptStatus.PASS, "parsed"), calls[0]


@acceptance("tool-call", "a tool parser that does not match the model's format: calls arrive as plain text",
            applies=_no_tool_parser)
def tool_call(ctx: AcceptContext):
    ask = [{"role": "user", "content": TOOL_ASK}]
    answer = yield Request("POST", "/v1/chat/completions", _model(ctx, chat(ask, 128, tools=[TOOL],
                                                                            tool_choice="auto")))
    first, call = judge_tool_call("tool-call", answer)
    if call is None:
        return first
    back = ask + [{"role": "assistant", "content": None, "tool_calls": [call]},
                  {"role": "tool", "tool_call_id": call.get("id", ""), "content": TOOL_RESULT}]
    answer = yield Request("POST", "/v1/chat/completions", _model(ctx, chat(back, 64, tools=[TOOL])))
    problem = answer.problem()
    if problem:
        return Result("tool-call", AcceptStatus.FAIL, f"the round trip: {problem}")
    content = answer.text_of("content")
    if "22" not in content:
        return Result("tool-call", AcceptStatus.FAIL, f"the tool's result was not used: answered {content[:100]!r}")
    return Result("tool-call", AcceptStatus.PASS, f"get_weather(city='Taipei') parsed, result used: {content[:60]!r}")


# ---- language -------------------------------------------------------------------------------------------

def judge_language(name: str, answer: Answer) -> Result:
    problem = answer.problem()
    if problem:
        return Result(name, AcceptStatus.FAIL, problem)
    text = answer.text_of("content")
    if cjk_count(text) < 4:
        return Result(name, AcceptStatus.FAIL, f"not answered in Chinese: {text[:80]!r}")
    bad = simplified_only(text)
    if bad:
        return Result(name, AcceptStatus.FAIL, f"Simplified-only characters in a zh-Hant answer: {''.join(bad[:12])} "
                                               f"(in {text[:60]!r})")
    return Result(name, AcceptStatus.PASS, f"{cjk_count(text)} characters, none Simplified-only: {text[:40]!r}")


@acceptance("language", "Traditional Chinese asked, Simplified characters answered (field notes: zh-Hant "
                        "output checked by hand)", default=False)
def language(ctx: AcceptContext):
    answer = yield Request("POST", "/v1/chat/completions",
                           _model(ctx, chat([{"role": "user", "content": ZH_HANT_ASK}], 8)))
    return judge_language("language", answer)


# ---- thinking -------------------------------------------------------------------------------------------

def _no_reasoning_parser(ctx: AcceptContext) -> str | None:
    return None if _flag(ctx, "reasoning-parser") else "no reasoning parser configured (vllm.extra reasoning-parser)"


def judge_thinking(name: str, answer: Answer) -> Result:
    problem = answer.problem()
    if problem:
        return Result(name, AcceptStatus.FAIL, problem)
    reasoning = answer.text_of("reasoning_content") or answer.text_of("reasoning")
    content = answer.text_of("content")
    if "<think>" in content or "</think>" in content:
        return Result(name, AcceptStatus.FAIL, f"the thinking arrived inside content: {content[:80]!r}")
    if not reasoning:
        return Result(name, AcceptStatus.FAIL, f"no reasoning field in the answer (content {content[:60]!r})")
    if not content:
        return Result(name, AcceptStatus.FAIL, f"reasoning {reasoning[:40]!r} but no content")
    return Result(name, AcceptStatus.PASS, f"reasoning {len(reasoning)} chars, content {content[:40]!r}")


@acceptance("thinking", "a chat template or reasoning parser that leaves the thinking in the answer",
            applies=_no_reasoning_parser)
def thinking(ctx: AcceptContext):
    answer = yield Request("POST", "/v1/chat/completions",
                           _model(ctx, chat([{"role": "user", "content": "What is 17 + 25?"}], 64)))
    return judge_thinking("thinking", answer)
