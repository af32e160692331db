"""A recipe's own checks (acceptance.custom: a prompt and an expected substring or `regex:`)."""
from __future__ import annotations

import re

from ..config.acceptance import CustomCheck
from .checks import _model, chat, completion
from .model import AcceptContext, AcceptStatus, Answer, Request, Result


def judge_custom(check: CustomCheck, answer: Answer) -> Result:
    problem = answer.problem()
    if problem:
        return Result(check.name, AcceptStatus.FAIL, problem, advisory=check.advisory)
    text = answer.text_of("content" if check.chat else "text")
    if check.expect.startswith("regex:"):
        ok = re.search(check.expect[len("regex:"):], text) is not None
    else:
        ok = check.expect in text
    said = f"expected {check.expect!r}, answered {text[:100]!r}"
    return Result(check.name, AcceptStatus.PASS if ok else AcceptStatus.FAIL, said, advisory=check.advisory)


def custom_exchange(check: CustomCheck):
    def exchange(ctx: AcceptContext):
        if check.chat:
            body = chat([{"role": "user", "content": check.prompt}], check.max_tokens)
            answer = yield Request("POST", "/v1/chat/completions", _model(ctx, body))
        else:
            answer = yield Request("POST", "/v1/completions", _model(ctx, completion(check.prompt, check.max_tokens)))
        return judge_custom(check, answer)
    return exchange
