"""The one OpenAI-compatible model client (httpx) that all model traffic goes through.

Speaks the subset rsi needs of what vLLM, SGLang and the embedded server share: chat completions
(with tools), the model list, and LoRA adapter load/unload. Transient failures (connect errors,
timeouts, 429, 5xx) are retried with exponential backoff and finally raised as `ModelUnavailable`
(an `InfraError`, so a trial records them as infra, never against the model). Other 4xx answers are
the caller's mistake and raise `ModelRequestError` at once, carrying the server's own message.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from types import TracebackType
from typing import Any

import httpx
from tenacity import (
    RetryCallState,
    Retrying,
    retry_if_exception_type,
    stop_after_attempt,
    stop_any,
    wait_exponential,
)
from tenacity.stop import stop_base

from rsi.core.errors import InfraError, RsiError
from rsi.core.mol import choice_regex
from rsi.core.trial import Usage


class ModelUnavailable(InfraError):
    """The endpoint could not be reached or kept failing (connect error, timeout, 429, 5xx)."""


class ModelRequestError(RsiError):
    """The endpoint refused the request (4xx other than 429): unknown model, bad body, ..."""

    exit_code = 2

    def __init__(self, message: str, *, status_code: int | None = None) -> None:
        super().__init__(message)
        self.status_code = status_code


class ChoiceRefused(InfraError):
    """A choice answer outside the label set (a server that ignored the constraint): never routed on."""


class _Transient(Exception):
    """Internal: a retryable answer (429/5xx); carries the message for the final error."""

    def __init__(self, message: str, status_code: int) -> None:
        super().__init__(message)
        self.status_code = status_code


@dataclass
class ToolCall:
    """One tool call the model asked for. `arguments` is `{}` when `raw_arguments` is not a JSON object."""

    id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str


@dataclass
class ChatResult:
    """One chat completion: the first choice's text and tool calls, plus accounting."""

    content: str | None
    tool_calls: list[ToolCall]
    finish_reason: str | None
    usage: Usage
    model: str
    latency_sec: float
    raw: dict[str, Any] = field(repr=False)
    # Seconds the server held the request in its queue before generating (the embedded server
    # reports it in the `x-queue-seconds` header; 0 where a server does not say).
    queue_sec: float = 0.0
    # Seconds the server spent prefilling the prompt and decoding the reply (the embedded server's
    # `x-prefill-seconds` / `x-decode-seconds` headers; 0 where a server does not say).
    prefill_sec: float = 0.0
    decode_sec: float = 0.0
    # The stop string that ended the completion, where the server says (vLLM `stop_reason`, SGLang
    # `matched_stop`); OpenAI semantics leave it out of `content`. None otherwise.
    stop_reason: str | None = None
    # With `token_ids=True` on the client, where the server returns them (the embedded server; vLLM with
    # `return_token_ids`): the exact prompt tokens, the sampled tokens and their logprobs.
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None


@dataclass
class ChoiceResult:
    """One constrained choice: the label (always one of the set), its margin over the runner-up where
    the server says (the embedded server, in nats), and accounting."""

    label: str
    margin: float | None
    scores: dict[str, float] | None
    usage: Usage
    latency_sec: float
    queue_sec: float = 0.0
    attempts: int = 1


def _token_fields(data: dict[str, Any], choice: dict[str, Any]) -> dict[str, Any]:
    """prompt/completion token ids (vLLM `prompt_token_ids` / `choices[].token_ids`) and the sampled
    tokens' logprobs (OpenAI `choices[].logprobs.content[].logprob`), where the answer has them."""
    out: dict[str, Any] = {}
    p, c = data.get("prompt_token_ids"), choice.get("token_ids")
    if isinstance(p, list) and isinstance(c, list):
        out["prompt_token_ids"], out["completion_token_ids"] = [int(x) for x in p], [int(x) for x in c]
    lp = choice.get("logprobs")
    content = lp.get("content") if isinstance(lp, dict) else None
    if isinstance(content, list) and all(isinstance(x, dict) and "logprob" in x for x in content):
        out["logprobs"] = [float(x["logprob"]) for x in content]
    return out


def _error_message(resp: httpx.Response) -> str:
    """The server's own error message: OpenAI `{"error": {"message"}}`, FastAPI `{"detail"}`, or text."""
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip()[:500] or resp.reason_phrase
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
        if isinstance(err, str):
            return err
        for key in ("message", "detail"):
            if body.get(key):
                return str(body[key])
    return json.dumps(body)[:500]


def parse_tool_calls(message: dict[str, Any]) -> list[ToolCall]:
    """OpenAI `message.tool_calls` -> ToolCall list; invalid JSON arguments keep the raw text."""
    out: list[ToolCall] = []
    for i, tc in enumerate(message.get("tool_calls") or []):
        fn = tc.get("function") or {}
        raw = fn.get("arguments")
        if isinstance(raw, dict):  # some servers send an object instead of a JSON string
            args, raw_text = raw, json.dumps(raw)
        else:
            raw_text = "" if raw is None else str(raw)
            try:
                parsed = json.loads(raw_text) if raw_text.strip() else {}
            except ValueError:
                parsed = {}
            args = parsed if isinstance(parsed, dict) else {}
        out.append(
            ToolCall(
                id=str(tc.get("id") or f"call_{i}"),
                name=str(fn.get("name") or ""),
                arguments=args,
                raw_arguments=raw_text,
            )
        )
    return out


def parse_usage(body: dict[str, Any]) -> Usage:
    """Token usage of one call; cached tokens from `prompt_tokens_details.cached_tokens` if reported."""
    u = body.get("usage") or {}
    details = u.get("prompt_tokens_details") or {}
    return Usage(
        prompt_tokens=int(u.get("prompt_tokens") or 0),
        completion_tokens=int(u.get("completion_tokens") or 0),
        cached_tokens=int(details.get("cached_tokens") or 0),
        calls=1,
    )


def _matched_stop(choice: dict[str, Any]) -> str | None:
    """The stop *string* that ended a choice: vLLM's `stop_reason`, SGLang's `matched_stop` (token ids -> None)."""
    for key in ("stop_reason", "matched_stop"):
        v = choice.get(key)
        if isinstance(v, str) and v:
            return v
    return None


def _queue_sec(resp: httpx.Response, header: str = "x-queue-seconds") -> float:
    try:
        return max(0.0, float(resp.headers.get(header, "0")))
    except ValueError:
        return 0.0


class _StopAtDeadline(stop_base):
    """Stop retrying when the next back-off would end past the deadline (time.monotonic())."""

    def __init__(self, deadline: float | None, backoff: wait_exponential) -> None:
        self.deadline = deadline
        self.backoff = backoff

    def __call__(self, retry_state: RetryCallState) -> bool:
        return self.deadline is not None and time.monotonic() + self.backoff(retry_state) >= self.deadline


class ChatClient:
    """Client for one OpenAI-compatible base URL such as `http://127.0.0.1:8765/v1`."""

    # the back-off of a client made without one: class-wide, so a test of retries can shorten every client's
    BACKOFF_INITIAL = 0.5
    BACKOFF_MAX = 8.0

    def __init__(
        self,
        base_url: str,
        *,
        api_key: str | None = None,
        timeout: float = 120.0,
        max_attempts: int = 4,
        backoff_initial: float | None = None,
        backoff_max: float | None = None,
        transport: httpx.BaseTransport | None = None,
        token_ids: bool = False,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        # Ask for prompt/completion token ids and logprobs (vLLM `return_token_ids` + OpenAI `logprobs`):
        # only for servers that accept the fields (OpenAI's API refuses unknown ones).
        self.token_ids = token_ids
        self.max_attempts = max(1, max_attempts)
        self.backoff_initial = self.BACKOFF_INITIAL if backoff_initial is None else backoff_initial
        self.backoff_max = self.BACKOFF_MAX if backoff_max is None else backoff_max
        headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
        self._http = httpx.Client(timeout=timeout, headers=headers, transport=transport)

    # -- plumbing -------------------------------------------------------------------------

    def _url(self, path: str) -> str:
        return f"{self.base_url}/{path.lstrip('/')}"

    def _root_url(self, path: str) -> str:
        """`path` at the server root: SGLang serves its adapter routes outside `/v1`."""
        base = self.base_url[: -len("/v1")] if self.base_url.endswith("/v1") else self.base_url
        return f"{base}/{path.lstrip('/')}"

    def _send_once(self, method: str, url: str, body: dict[str, Any] | None) -> httpx.Response:
        resp = self._http.request(method, url, json=body)
        if resp.status_code == 429 or resp.status_code >= 500:
            raise _Transient(f"HTTP {resp.status_code}: {_error_message(resp)}", resp.status_code)
        return resp

    def _request(
        self,
        method: str,
        url: str,
        body: dict[str, Any] | None = None,
        *,
        raise_404: bool = True,
        deadline: float | None = None,
    ) -> httpx.Response:
        """Send with retries on transient failures; raise ModelRequestError on other 4xx.

        With `raise_404=False` a 404 is returned to the caller (for route fallbacks). With a
        `deadline` (time.monotonic()), no retry starts, and no back-off sleeps, past it: the
        client's retries never outlast the agent's remaining budget.
        """

        def give_up(state: RetryCallState) -> None:
            exc = state.outcome.exception() if state.outcome else None
            raise ModelUnavailable(
                f"model endpoint {self.base_url} unavailable after {state.attempt_number} attempt(s): "
                f"{type(exc).__name__}: {exc}"
            ) from exc

        backoff = wait_exponential(multiplier=self.backoff_initial, max=self.backoff_max)

        out_of_time = _StopAtDeadline(deadline, backoff)
        retrying = Retrying(
            stop=stop_any(stop_after_attempt(self.max_attempts), out_of_time),
            wait=backoff,
            retry=retry_if_exception_type((httpx.TransportError, _Transient)),
            retry_error_callback=give_up,
            reraise=False,
        )
        resp: httpx.Response = retrying(self._send_once, method, url, body)
        if resp.status_code >= 400 and not (resp.status_code == 404 and not raise_404):
            raise ModelRequestError(
                f"model endpoint refused {method} {url} (HTTP {resp.status_code}): {_error_message(resp)}",
                status_code=resp.status_code,
            )
        return resp

    # -- API ------------------------------------------------------------------------------

    def chat(
        self,
        model: str,
        messages: list[dict[str, Any]],
        *,
        tools: list[dict[str, Any]] | None = None,
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int = 256,
        stop: list[str] | None = None,
        seed: int | None = None,
        deadline: float | None = None,
    ) -> ChatResult:
        """One chat completion (no streaming). `model` names the base or a loaded adapter.

        `deadline` (time.monotonic()) bounds the retries: none starts past it."""
        body: dict[str, Any] = {
            "model": model,
            "messages": messages,
            "temperature": temperature,
            "top_p": top_p,
            "max_tokens": max_tokens,
        }
        if tools:
            body["tools"] = tools
        if stop:
            body["stop"] = stop
        if seed is not None:
            body["seed"] = seed
        if self.token_ids:
            body["return_token_ids"] = True
            body["logprobs"] = True
        t0 = time.monotonic()
        resp = self._request("POST", self._url("chat/completions"), body, deadline=deadline)
        latency = time.monotonic() - t0
        queue_sec = _queue_sec(resp)
        try:
            data = resp.json()
            choice = data["choices"][0]
            message = choice.get("message") or {}
        except (ValueError, KeyError, IndexError, TypeError) as e:
            raise ModelUnavailable(f"model endpoint {self.base_url} sent a malformed completion: {e}") from e
        return ChatResult(
            content=message.get("content"),
            tool_calls=parse_tool_calls(message),
            finish_reason=choice.get("finish_reason"),
            usage=parse_usage(data),
            model=str(data.get("model") or model),
            latency_sec=latency,
            raw=data,
            queue_sec=queue_sec,
            prefill_sec=_queue_sec(resp, "x-prefill-seconds"),
            decode_sec=_queue_sec(resp, "x-decode-seconds"),
            stop_reason=_matched_stop(choice),
            **_token_fields(data, choice),
        )

    def choose(
        self,
        model: str,
        messages: list[dict[str, Any]],
        labels: list[str],
        *,
        constraint: str = "choice",
        deadline: float | None = None,
    ) -> ChoiceResult:
        """One label of `labels` for `messages`, constrained by the server: `structured_outputs.choice`
        (vLLM's current spelling; the embedded server scores the labels) or SGLang's `regex`.

        The answer is checked against the set: a label outside it (a server that ignored the constraint)
        is retried, then raised as `ChoiceRefused` (infra), never returned."""
        body: dict[str, Any] = {"model": model, "messages": messages, "temperature": 0.0,
                                "max_tokens": 8}
        if constraint == "regex":
            body["regex"] = choice_regex(labels)
        else:
            body["structured_outputs"] = {"choice": list(labels)}
        got: list[str] = []
        for attempt in range(1, self.max_attempts + 1):
            t0 = time.monotonic()
            resp = self._request("POST", self._url("chat/completions"), body, deadline=deadline)
            latency = time.monotonic() - t0
            try:
                data = resp.json()
                choice = data["choices"][0]
                content = (choice.get("message") or {}).get("content")
            except (ValueError, KeyError, IndexError, TypeError) as e:
                raise ModelUnavailable(f"model endpoint {self.base_url} sent a malformed choice: {e}") from e
            label = content.strip() if isinstance(content, str) else None
            if label in labels:
                info = choice.get("choice") if isinstance(choice.get("choice"), dict) else {}
                m = info.get("margin")
                scores = info.get("scores")
                return ChoiceResult(
                    label=label, margin=float(m) if isinstance(m, int | float) else None,
                    scores={str(k): float(v) for k, v in scores.items()} if isinstance(scores, dict) else None,
                    usage=parse_usage(data), latency_sec=latency,
                    queue_sec=_queue_sec(resp), attempts=attempt)
            got.append(repr(content)[:80])
            if deadline is not None and time.monotonic() >= deadline:
                break
        raise ChoiceRefused(f"model endpoint {self.base_url} answered {', '.join(got)} for a choice of "
                            f"{'/'.join(labels)} ({len(got)} attempt(s)): a label outside the set is never used")

    def list_models(self) -> list[str]:
        """Ids the endpoint serves: the base model and any loaded adapters."""
        data = self._request("GET", self._url("models")).json()
        return [str(m["id"]) for m in data.get("data") or [] if isinstance(m, dict) and "id" in m]

    def _adapter_call(self, route: str, body: dict[str, Any]) -> None:
        resp = self._request("POST", self._url(route), body, raise_404=False)
        if resp.status_code == 404 and self._root_url(route) != self._url(route):
            # vLLM's route may be missing (SGLang serves it at the root). If the root also 404s,
            # the first answer (e.g. "adapter not found") is the one worth showing.
            alt = self._request("POST", self._root_url(route), body, raise_404=False)
            if alt.status_code != 404:
                resp = alt
        if resp.status_code >= 400:
            raise ModelRequestError(
                f"model endpoint refused {route} (HTTP {resp.status_code}): {_error_message(resp)}",
                status_code=resp.status_code,
            )

    def load_adapter(self, name: str, path: str) -> None:
        """Load the PEFT adapter at `path` (as the server sees it) under the serve name `name`."""
        self._adapter_call("load_lora_adapter", {"lora_name": name, "lora_path": path})

    def unload_adapter(self, name: str) -> None:
        """Unload the adapter served as `name`."""
        self._adapter_call("unload_lora_adapter", {"lora_name": name})

    def server_info(self) -> dict[str, Any]:
        """What the server says about itself at `GET /health` (the embedded server: its sizing,
        queue and prefix-cache counters); `{}` where it says nothing (vLLM answers an empty 200)."""
        try:
            resp = self._http.get(self._root_url("health"), timeout=5.0)
            body = resp.json() if resp.status_code == 200 and resp.content else {}
        except (httpx.HTTPError, ValueError):
            return {}
        return body if isinstance(body, dict) else {}

    def healthy(self) -> bool:
        """True if `GET /models` answers 200 within a few seconds; one try, no retries."""
        try:
            return self._http.get(self._url("models"), timeout=5.0).status_code == 200
        except httpx.HTTPError:
            return False

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> ChatClient:
        return self

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()
