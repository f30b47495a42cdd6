"""`POST /v1/completions`: OpenAI's legacy text completions, as vLLM serves them.

The prompt is raw text (tokenized with the tokenizer's own special tokens, no chat template) or token
ids taken as they are; a list of either is a batch (choice `index` = prompt * n + j). Honoured:
`max_tokens` (default 16, as OpenAI and vLLM), `temperature` / `top_p` (default greedy, as this
server's chat route), `n`, `stop`, `seed` (choice j of n samples with seed + j), `stream` +
`stream_options.include_usage`, `logprobs` (an int k <= 20: each token's logprob and the k most likely,
plus the chosen one, as `tokens` / `token_logprobs` / `top_logprobs` / `text_offset`), `echo` (the
prompt leads the text; with `logprobs`, the prompt tokens' logprobs lead too, the first one null),
`response_format` (json_object / json_schema, as on the chat route), vLLM's `return_token_ids`.
`suffix`, `best_of` other than n, and any field that would change the text are refused with 400
naming them (fields.py).
"""

from __future__ import annotations

import json
import time
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, model_validator
from starlette.concurrency import run_in_threadpool

from rsi.models.server.decode import GenRequest, GenResult, TokenLogprob, timing_headers
from rsi.models.server.fields import check_extra
from rsi.models.server.grammar import Node
from rsi.models.server.http_jobs import JobStream, Submits, error_body, job_error, submit_all, usage_body, wait_all
from rsi.models.server.schemas import MAX_N, StreamOptions, response_format_grammar

DEFAULT_MAX_TOKENS = 16  # OpenAI's and vLLM's default for text completions
MAX_LOGPROBS = 20  # vLLM's default max_logprobs
MAX_PROMPTS = 64


class CompletionRequest(BaseModel):
    model_config = ConfigDict(extra="allow")

    model: str = Field(min_length=1)
    prompt: str | list[str] | list[int] | list[list[int]]
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0)
    top_p: float | None = Field(default=None, gt=0, le=1)
    n: int = Field(default=1, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    seed: int | None = None
    stream: bool = False
    stream_options: StreamOptions | None = None
    logprobs: int | None = Field(default=None, ge=0, le=MAX_LOGPROBS)
    echo: bool = False
    return_token_ids: bool = False
    response_format: dict[str, Any] | None = None
    _grammar: Node | None = PrivateAttr(default=None)

    @model_validator(mode="after")
    def _check(self) -> CompletionRequest:
        extra = dict(self.model_extra or {})
        if extra.get("suffix"):
            raise ValueError("suffix: not served (no fill-in-the-middle)")
        extra.pop("suffix", None)
        best_of = extra.pop("best_of", None)
        if best_of is not None and best_of != self.n:
            raise ValueError(f"best_of={best_of!r}: only best_of = n is served (every sampled choice is returned)")
        check_extra(extra, {"add_special_tokens": (True,)})
        prompts = self.prompts()
        if not prompts or len(prompts) > MAX_PROMPTS:
            raise ValueError(f"prompt: 1 to {MAX_PROMPTS} prompts")
        if any(isinstance(p, list) and not p for p in prompts):
            raise ValueError("prompt: an empty list of token ids")
        self._grammar = response_format_grammar(self.response_format)
        return self

    def prompts(self) -> list[str | list[int]]:
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if p and all(isinstance(x, int) for x in p):
            return [list(p)]  # type: ignore[arg-type]
        return list(p)  # type: ignore[arg-type]

    def to_gen_requests(self) -> list[GenRequest]:
        """One engine request per prompt and choice, in the order of the answer's choices."""
        stop = [self.stop] if isinstance(self.stop, str) else list(self.stop or [])
        k = self.logprobs
        return [
            GenRequest(
                model=self.model, messages=[], prompt=p,
                temperature=self.temperature if self.temperature is not None else 0.0,
                top_p=self.top_p if self.top_p is not None else 1.0,
                max_tokens=self.max_tokens or DEFAULT_MAX_TOKENS,
                stop=[s for s in stop if s],
                seed=self.seed + j if self.seed is not None else None,
                logprobs=k is not None, top_logprobs=k or 0,
                prompt_logprobs=k if self.echo and k is not None else None,
                grammar=self._grammar,
            )
            for p in self.prompts() for j in range(self.n)
        ]


def _entry_top(e: TokenLogprob) -> dict[str, float] | None:
    if e.logprob is None:
        return None
    top = {t: lp for t, _b, lp in e.top}
    top.setdefault(e.token, e.logprob)  # the chosen token is always there (OpenAI: up to logprobs + 1)
    return top


def _logprobs(res: GenResult, echo: bool) -> dict[str, Any] | None:
    """OpenAI's legacy logprobs block; `text_offset` counts from the start of the choice's text."""
    if res.logprob_content is None:
        return None
    entries = [*(res.prompt_logprob_content or [] if echo else []), *res.logprob_content]
    offsets, pos = [], 0
    for e in entries:
        offsets.append(pos)
        pos += len(e.token)
    return {"tokens": [e.token for e in entries], "token_logprobs": [e.logprob for e in entries],
            "top_logprobs": [_entry_top(e) for e in entries], "text_offset": offsets}


def _text(res: GenResult, echo: bool) -> str:
    return ((res.prompt_text or "") if echo else "") + (res.text or "")


def _choice(index: int, res: GenResult, body: CompletionRequest) -> dict[str, Any]:
    choice: dict[str, Any] = {
        "index": index, "text": _text(res, body.echo),
        "logprobs": _logprobs(res, body.echo), "finish_reason": res.finish_reason,
        "stop_reason": res.stop_reason,
    }
    if body.return_token_ids:
        choice["prompt_token_ids"] = res.prompt_ids
        choice["token_ids"] = res.completion_ids
    return choice


def _usage(body: CompletionRequest, results: list[GenResult]) -> dict[str, Any]:
    """Every prompt counted once, every choice's completion."""
    per_prompt = [results[i] for i in range(0, len(results), body.n)]
    usage = usage_body(results)
    usage["prompt_tokens"] = sum(r.prompt_tokens for r in per_prompt)
    usage["total_tokens"] = usage["prompt_tokens"] + usage["completion_tokens"]
    usage["prompt_tokens_details"] = {"cached_tokens": sum(r.cached_tokens for r in per_prompt)}
    return usage


def _chunk(cid: str, created: int, model: str, index: int, text: str, **choice: Any) -> str:
    body = {"id": cid, "object": "text_completion", "created": created, "model": model,
            "choices": [{"index": index, "text": text, "logprobs": None, "finish_reason": None, **choice}]}
    return f"data: {json.dumps(body)}\n\n"


def _stream(engine: Submits, body: CompletionRequest, reqs: list[GenRequest], prompts: list[str]) -> StreamingResponse:
    stream = JobStream(engine, reqs)
    cid, created, model = f"cmpl-{uuid.uuid4().hex}", int(time.time()), body.model
    include_usage = bool(body.stream_options and body.stream_options.include_usage)

    async def gen() -> AsyncIterator[str]:
        results: dict[int, GenResult] = {}
        try:
            if body.echo:  # the prompt leads each choice's text
                for i in range(len(reqs)):
                    yield _chunk(cid, created, model, i, prompts[i // body.n])
            async for kind, i, value in stream.events():
                if kind == "delta":
                    yield _chunk(cid, created, model, i, value)
                    continue
                failed = job_error(value)
                if failed is not None:
                    stream.cancel_unfinished()
                    yield f"data: {json.dumps(error_body(*failed))}\n\n"
                    yield "data: [DONE]\n\n"
                    return
                res = results[i] = value.wait(0)
                # the choice's logprobs come whole with its last chunk (streamed text is cut at stop strings)
                yield _chunk(cid, created, model, i, "", finish_reason=res.finish_reason,
                             stop_reason=res.stop_reason, logprobs=_logprobs(res, body.echo))
            if include_usage:
                usage = {"id": cid, "object": "text_completion", "created": created, "model": model, "choices": [],
                         "usage": _usage(body, [results[i] for i in range(len(reqs))])}
                yield f"data: {json.dumps(usage)}\n\n"
            yield "data: [DONE]\n\n"
        finally:
            stream.cancel_unfinished()

    return StreamingResponse(gen(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def completions_route(engine: Submits) -> Callable[[CompletionRequest, Request], Awaitable[Any]]:
    async def completions(body: CompletionRequest, request: Request) -> JSONResponse | StreamingResponse:
        reqs = body.to_gen_requests()
        if body.stream:
            prompts = [await run_in_threadpool(engine.prompt_text, r) for r in reqs[:: body.n]]  # 400s now
            return _stream(engine, body, reqs, prompts)
        results = await wait_all(request, submit_all(engine, reqs))
        return JSONResponse({
            "id": f"cmpl-{uuid.uuid4().hex}", "object": "text_completion", "created": int(time.time()),
            "model": body.model, "choices": [_choice(i, r, body) for i, r in enumerate(results)],
            "usage": _usage(body, results),
        }, headers=timing_headers(results))

    return completions


__all__ = ["CompletionRequest", "completions_route"]
