"""The HTTP side's hold on engine jobs: submit a request's n choices, wait for them without holding a
thread, follow them as a stream of deltas, and cancel them all when the client goes away.

Shared by the chat and text-completion routes; OpenAI's error body and usage block live here too."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from typing import Any, Protocol

from fastapi import Request

from rsi.models.server.decode import GenRequest, GenResult, TokenLogprob
from rsi.models.server.jobs import EngineError, Job

DISCONNECT_POLL_SEC = 0.2
_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    500: "InternalServerError",
    503: "ServiceUnavailableError",
}


class Submits(Protocol):
    """What the routes need of the engine (the real one, or a fake in unit tests)."""

    def submit(self, req: GenRequest, on_delta: Any = None) -> Job: ...

    def prompt_ids(self, req: GenRequest) -> Any: ...

    def prompt_text(self, req: GenRequest) -> str: ...


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": _ERROR_TYPES.get(status, "Error"), "code": status}}


def usage_body(results: Sequence[GenResult]) -> dict[str, Any]:
    """OpenAI's usage for a request's choices: the prompt counted once, every choice's completion."""
    first = results[0]
    completion = sum(r.completion_tokens for r in results)
    return {
        "prompt_tokens": first.prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": first.prompt_tokens + completion,
        "prompt_tokens_details": {"cached_tokens": first.cached_tokens},
    }


def top_entries(entry: TokenLogprob) -> list[dict[str, Any]]:
    return [{"token": t, "logprob": lp, "bytes": b} for t, b, lp in entry.top]


def submit_all(engine: Submits, reqs: Sequence[GenRequest],
               on_delta: Any = None) -> list[Job]:
    """Submit every request (one per choice); if one is refused, the ones already queued are cancelled.
    `on_delta(index)` makes the delta callback of choice `index`."""
    jobs: list[Job] = []
    try:
        for i, req in enumerate(reqs):
            jobs.append(engine.submit(req, on_delta=on_delta(i) if on_delta else None))
    except BaseException:
        for j in jobs:
            j.cancel()
        raise
    return jobs


async def wait_job(request: Request, job: Job) -> GenResult:
    """The job's result; cancel it if the client disconnects (or this task is cancelled) first."""
    loop = asyncio.get_running_loop()
    finished = asyncio.Event()
    job.add_done_callback(lambda _j: loop.call_soon_threadsafe(finished.set))
    try:
        while not finished.is_set():
            try:
                await asyncio.wait_for(finished.wait(), timeout=DISCONNECT_POLL_SEC)
            except TimeoutError:
                if await request.is_disconnected():
                    job.cancel()
                    raise EngineError("client disconnected", status=499) from None
    except asyncio.CancelledError:
        job.cancel()
        raise
    return job.wait(0)


async def wait_all(request: Request, jobs: Sequence[Job]) -> list[GenResult]:
    """Every job's result, in order; on the first failure (or a disconnect) the others are cancelled."""
    try:
        return [await wait_job(request, j) for j in jobs]
    except BaseException:
        for j in jobs:
            j.cancel()
        raise


class JobStream:
    """A request's choices followed together: ("delta", index, text) as text comes, ("done", index, job) as
    each ends. Whatever is still running when the consumer stops (the client went away) is cancelled."""

    def __init__(self, engine: Submits, reqs: Sequence[GenRequest], *, deltas: bool = True) -> None:
        loop = asyncio.get_running_loop()
        self._events: asyncio.Queue[tuple[str, int, Any]] = asyncio.Queue()

        def on_delta(i: int) -> Any:
            return lambda text: loop.call_soon_threadsafe(self._events.put_nowait, ("delta", i, text))

        self.jobs = submit_all(engine, reqs, on_delta if deltas else None)
        for i, job in enumerate(self.jobs):
            job.add_done_callback(
                lambda j, i=i: loop.call_soon_threadsafe(self._events.put_nowait, ("done", i, j)))  # type: ignore[misc]

    async def events(self) -> AsyncIterator[tuple[str, int, Any]]:
        left = len(self.jobs)
        try:
            while left:
                kind, i, value = await self._events.get()
                if kind == "done":
                    left -= 1
                yield kind, i, value
        finally:
            self.cancel_unfinished()

    def cancel_unfinished(self) -> None:
        for j in self.jobs:
            if not j.done.is_set():
                j.cancel()


def job_error(job: Job) -> tuple[int, str] | None:
    """(status, message) of a failed job, else None."""
    if job.error is None:
        return None
    return int(getattr(job.error, "status", 500)), str(job.error)


__all__ = ["DISCONNECT_POLL_SEC", "JobStream", "Submits", "error_body", "job_error", "submit_all", "top_entries",
           "usage_body", "wait_all", "wait_job"]
