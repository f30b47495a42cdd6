"""The embedded server's HTTP side: vLLM's OpenAI-compatible API subset on FastAPI + uvicorn.

Routes: `GET /v1/models`, `POST /v1/chat/completions` and `POST /v1/completions` (legacy text
completions, completions.py), both with `n` choices and `stream: true` (server-sent events as OpenAI
and vLLM send them), `POST /v1/load_lora_adapter`, `POST /v1/unload_lora_adapter`, and
`GET /health` (what the engine runs with: sizing, queue, prefix-cache counters). Errors use OpenAI's
shape `{"error": {"message", "type", "code"}}` with proper 4xx codes; a full queue answers 503.

Requests wait on the engine without holding a thread. A request whose client goes away (a client
timeout, a closed stream) is cancelled: it leaves the engine's queue or batch at once, so an
abandoned request never holds the model.
"""

from __future__ import annotations

import json
import logging
import time
import uuid
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException as StarletteHTTPException

from rsi.models.server.completions import completions_route
from rsi.models.server.decode import GenRequest, GenResult, timing_headers
from rsi.models.server.engine_base import EngineBase as Engine
from rsi.models.server.http_jobs import (
    JobStream,
    error_body,
    job_error,
    submit_all,
    top_entries,
    usage_body,
    wait_all,
)
from rsi.models.server.jobs import EngineError
from rsi.models.server.schemas import ChatCompletionRequest, LoadLoraRequest, UnloadLoraRequest

log = logging.getLogger("rsi.models.server")


def _error(status: int, message: str) -> JSONResponse:
    return JSONResponse(error_body(status, message), status_code=status)


def _logprobs(res: GenResult) -> dict[str, Any] | None:
    if res.logprob_content is not None:
        return {"content": [{"token": e.token, "logprob": e.logprob, "bytes": e.bytes, "top_logprobs": top_entries(e)}
                            for e in res.logprob_content]}
    if res.logprobs is None:
        return None
    toks = res.tokens or [""] * len(res.logprobs)
    return {"content": [{"token": t, "logprob": lp, "bytes": list(t.encode()), "top_logprobs": []}
                        for t, lp in zip(toks, res.logprobs, strict=True)]}


def _choice(index: int, res: GenResult, token_ids: bool) -> dict[str, Any]:
    message: dict[str, Any] = {"role": "assistant", "content": res.text}
    if res.tool_calls:
        message["tool_calls"] = res.tool_calls
    choice: dict[str, Any] = {
        "index": index,
        "message": message,
        "finish_reason": res.finish_reason,
        "stop_reason": res.stop_reason,  # vLLM's field: the stop string that matched
        "logprobs": _logprobs(res),
    }
    if res.choice_scores is not None:  # a choice request: the label's margin over the runner-up (nats)
        ranked = sorted(res.choice_scores.values(), reverse=True)
        choice["choice"] = {
            "label": res.text, "margin": round(ranked[0] - ranked[1], 6) if len(ranked) > 1 else 0.0,
            "scores": res.choice_scores}
    if token_ids:  # vLLM's `return_token_ids`
        choice["token_ids"] = res.completion_ids
    return choice


def completion_body(req: GenRequest, res: GenResult | Sequence[GenResult], cid: str, created: int,
                    token_ids: bool = False) -> dict[str, Any]:
    """A chat.completion with one choice per result."""
    results = [res] if isinstance(res, GenResult) else list(res)
    body: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion",
        "created": created,
        "model": req.model,
        "choices": [_choice(i, r, token_ids) for i, r in enumerate(results)],
        "usage": usage_body(results),
    }
    if token_ids:
        body["prompt_token_ids"] = results[0].prompt_ids
    return body


def _chunk(cid: str, created: int, model: str, index: int, delta: dict[str, Any], **choice: Any) -> str:
    body: dict[str, Any] = {
        "id": cid,
        "object": "chat.completion.chunk",
        "created": created,
        "model": model,
        "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": None, **choice}],
    }
    return f"data: {json.dumps(body)}\n\n"


def _stream(engine: Engine, body: ChatCompletionRequest, reqs: list[GenRequest]) -> StreamingResponse:
    model = reqs[0].model
    stream = JobStream(engine, reqs)
    cid, created = f"chatcmpl-{uuid.uuid4().hex}", int(time.time())
    include_usage = bool(body.stream_options and body.stream_options.include_usage)

    async def gen() -> AsyncIterator[str]:
        results: list[GenResult] = []
        try:
            for i in range(len(reqs)):
                yield _chunk(cid, created, model, i, {"role": "assistant", "content": ""})
            async for kind, i, value in stream.events():
                if kind == "delta":
                    yield _chunk(cid, created, model, i, {"content": value})
                    continue
                failed = job_error(value)
                if failed is not None:
                    stream.cancel_unfinished()
                    yield f"data: {json.dumps(error_body(*failed))}\n\n"
                    yield "data: [DONE]\n\n"
                    return
                res = value.wait(0)
                results.append(res)
                delta: dict[str, Any] = {}
                if reqs[i].parses_tools and res.text:  # a reply that may hold a call is parsed whole, sent now
                    delta["content"] = res.text
                if res.tool_calls:
                    delta["tool_calls"] = [{"index": k, **tc} for k, tc in enumerate(res.tool_calls)]
                if delta:
                    yield _chunk(cid, created, model, i, delta)
                # the choice's logprobs come whole with its last chunk (streamed text is cut at stop strings)
                yield _chunk(cid, created, model, i, {}, finish_reason=res.finish_reason, stop_reason=res.stop_reason,
                             logprobs=_logprobs(res))
            if include_usage:
                usage = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                         "choices": [], "usage": usage_body(results)}
                yield f"data: {json.dumps(usage)}\n\n"
            yield "data: [DONE]\n\n"
        finally:  # the client went away mid-stream: nothing keeps running for it
            stream.cancel_unfinished()

    return StreamingResponse(gen(), media_type="text/event-stream", headers={"Cache-Control": "no-cache"})


def create_app(engine: Engine) -> FastAPI:
    app = FastAPI(title="rsi embedded model server", docs_url=None, redoc_url=None, openapi_url=None)
    app.state.engine = engine

    @app.exception_handler(EngineError)
    async def _engine_error(_r: Request, e: EngineError) -> JSONResponse:
        return _error(e.status, e.message)

    @app.exception_handler(RequestValidationError)
    async def _invalid(_r: Request, e: RequestValidationError) -> JSONResponse:
        return _error(400, "; ".join(_fmt(x) for x in e.errors()))

    @app.exception_handler(StarletteHTTPException)
    async def _http(_r: Request, e: StarletteHTTPException) -> JSONResponse:
        return _error(e.status_code, str(e.detail))

    @app.exception_handler(Exception)
    async def _crash(_r: Request, e: Exception) -> JSONResponse:
        log.exception("request failed")
        return _error(500, f"{type(e).__name__}: {e}")

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        created = int(time.time())
        base = engine.model_id
        # as vLLM lists a LoRA: `root` is the adapter directory the weights were loaded from, so a client (the
        # recording gateway) can hash what is actually served and compare it with the generation's manifest
        paths = dict(getattr(engine, "adapters", {}) or {})
        data = [
            {"id": mid, "object": "model", "created": created, "owned_by": "rsi",
             "root": str(Path(paths[mid]).resolve()) if mid in paths else base,
             "parent": base if mid != base else None}
            for mid in engine.model_ids()
        ]
        return {"object": "list", "data": data}

    @app.get("/health")
    @app.get("/v1/health")
    async def health() -> dict[str, Any]:
        return {"status": "ok", **engine.info()}

    @app.post("/v1/chat/completions", response_model=None)
    async def chat(body: ChatCompletionRequest, request: Request) -> JSONResponse | StreamingResponse:
        reqs = [body.to_gen_request(i) for i in range(body.n)]
        if body.stream:
            await run_in_threadpool(engine.prompt_ids, reqs[0])  # 400s before the stream starts
            return _stream(engine, body, reqs)
        results = await wait_all(request, submit_all(engine, reqs))
        return JSONResponse(
            completion_body(reqs[0], results, f"chatcmpl-{uuid.uuid4().hex}", int(time.time()),
                            body.return_token_ids),
            # Time the request waited for the engine: the harness does not charge it to the agent.
            headers=timing_headers(results),
        )

    app.post("/v1/completions", response_model=None)(completions_route(engine))

    @app.post("/v1/load_lora_adapter")
    async def load(body: LoadLoraRequest) -> dict[str, str]:
        await run_in_threadpool(engine.load_adapter, body.lora_name, body.lora_path)
        return {"status": "ok", "message": f"Success: LoRA adapter '{body.lora_name}' added successfully."}

    @app.post("/v1/unload_lora_adapter")
    async def unload(body: UnloadLoraRequest) -> dict[str, str]:
        await run_in_threadpool(engine.unload_adapter, body.lora_name)
        return {"status": "ok", "message": f"Success: LoRA adapter '{body.lora_name}' removed successfully."}

    return app


def _fmt(err: Any) -> str:
    loc = ".".join(str(x) for x in err.get("loc", ()) if x != "body")
    msg = str(err.get("msg"))
    if err.get("type") == "json_invalid":
        return f"request body is not valid JSON: {msg}"
    return f"{loc}: {msg}" if loc else msg


def serve(engine: Engine, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve until SIGTERM/SIGINT (uvicorn's own handlers), then stop the engine."""
    import uvicorn

    config = uvicorn.Config(
        create_app(engine),
        host=host,
        port=port,
        log_level="warning",
        access_log=False,
        timeout_graceful_shutdown=5,
        timeout_keep_alive=75,
    )
    server = uvicorn.Server(config)
    log.info("serving %s on http://%s:%d/v1", ", ".join(engine.model_ids()), host, port)
    try:
        server.run()
    finally:
        engine.close()
    if not server.started:
        raise OSError(f"cannot listen on {host}:{port}")


__all__ = ["completion_body", "create_app", "error_body", "serve"]
