"""The recording model gateway: a per-trial OpenAI-compatible endpoint in front of the generation's model.

An external agent harness (mini-swe-agent, a CLI coding agent) is pointed at its trial's own base URL,
`http://127.0.0.1:<port>/s/<key>/v1`, and talks plain OpenAI chat completions to it. The gateway forwards each
call to the real endpoint (the embedded server, vLLM) and records it — the request as the harness sent it, the
body forwarded, the response, the exact prompt and completion token ids and log-probs the server returned, the
served model and adapter, timings — as one `GatewayCall`. Those records are the trial's trajectory: what trains is
exactly what the model saw and said, never a re-rendering (rsi.harness.gateway_atif).

The gateway is where the contract's model-side limits hold for a harness rsi did not write (`SessionPolicy`):
- the model is pinned: a request naming any other model (the base, another adapter) is refused with 403, so a
  harness can never sample a policy other than the generation's;
- `max_tokens` / `max_completion_tokens` above the contract's per-turn ceiling are clamped to it (and a missing
  one is set to it); the clamp is recorded on the call;
- calls past the turn limit, past the agent deadline, or past the trial's token budget are refused with 403;
- `n > 1` and `stream: true` are refused with 400 (one recorded sample per call).
It asks the endpoint for token ids and log-probs (vLLM's `return_token_ids` + OpenAI `logprobs`) and strips what
the harness did not ask for from the answer, so the harness sees the response it would have seen directly.

The served adapter: each call records the `model` the endpoint answered with and the adapter's sha256, taken from
the endpoint's `GET /v1/models` entry when it names the adapter directory as its `root` (vLLM does: the weights are
hashed once per path), else from the serve name's `-<sha8>` suffix checked against the manifest's sha256
(`adapter_check`: `endpoint-root`, `serve-name` or `none`). A mismatch is recorded, never hidden.
"""

from __future__ import annotations

import hashlib
import json
import secrets
import socket
import threading
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
from pydantic import Field

from rsi.core.model import RsiModel
from rsi.core.trial import Usage

GATEWAY_SCHEMA_VERSION = 1
WEIGHTS = "adapter_model.safetensors"


class GatewayCall(RsiModel):
    """One chat completion as the gateway saw it (`gateway.jsonl`, one line per call)."""

    schema_version: int = GATEWAY_SCHEMA_VERSION
    index: int
    at: str
    status: int  # what the harness got back
    refused: str | None = None  # why the gateway answered itself instead of forwarding
    request: dict[str, Any]  # the body as the harness sent it
    # the fields the gateway set on the body it forwarded (model pinned, limits applied, token ids asked for)
    forwarded: dict[str, Any] | None = None
    # the endpoint's answer; its token ids and log-probs are lifted into the fields below
    response: dict[str, Any] | None = None
    pinned_model: str
    served_model: str | None = None
    adapter_sha256: str | None = None  # the served adapter's digest, where it could be established
    adapter_check: str = "none"  # endpoint-root | serve-name | none
    expected_adapter_sha256: str | None = None  # the manifest's
    clamped: dict[str, list[int | None]] = Field(default_factory=dict)  # field -> [asked, given]
    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    usage: Usage = Field(default_factory=Usage)
    upstream_sec: float = 0.0
    gateway_sec: float = 0.0  # time spent in the gateway itself (total minus upstream)

    @property
    def ok(self) -> bool:
        return self.status == 200 and self.response is not None


@dataclass
class SessionPolicy:
    """The limits one trial's calls run under (the effective limits, computed by the runner)."""

    model: str  # the generation's serve name: the only model this session answers for
    max_tokens: int  # per-call ceiling (the contract's max_tokens_per_turn, tightened)
    max_calls: int | None = None  # turns
    deadline: float | None = None  # time.monotonic() after which no call is forwarded
    token_budget: int | None = None  # prompt + completion tokens over the whole trial
    adapter_sha256: str | None = None  # the manifest's digest of the pinned adapter (None: the base model)


@dataclass
class GatewaySession:
    """One trial's endpoint: its base URL and key, its policy, its recorded calls."""

    key: str
    base_url: str
    upstream: str
    policy: SessionPolicy
    upstream_headers: dict[str, str] = field(default_factory=dict)
    calls: list[GatewayCall] = field(default_factory=list)
    usage: Usage = field(default_factory=Usage)
    lock: threading.Lock = field(default_factory=threading.Lock)
    _gateway: Gateway | None = None

    def close(self) -> None:
        if self._gateway is not None:
            self._gateway.close_session(self.key)

    def write(self, path: Path) -> Path:
        """The records as JSON lines (the trial's `gateway.jsonl`)."""
        path.parent.mkdir(parents=True, exist_ok=True)
        with self.lock:
            lines = [c.model_dump_json() for c in self.calls]
        path.write_text("".join(line + "\n" for line in lines))
        return path

    def __enter__(self) -> GatewaySession:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


def read_calls(path: Path) -> list[GatewayCall]:
    return [GatewayCall.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


def _error(status: int, message: str, kind: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": kind, "code": status}}


def sha8_of_serve_name(name: str) -> str | None:
    """The `<sha8>` suffix of a serve name `<lineage>-g<gen>-<sha8>` (DESIGN §4.4), if it has one."""
    tail = name.rsplit("-", 1)[-1]
    return tail if len(tail) == 8 and all(c in "0123456789abcdef" for c in tail) and "-" in name else None


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server

    def setup(self) -> None:
        super().setup()
        self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        return

    def _send(self, status: int, body: dict[str, Any]) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _session(self) -> tuple[GatewaySession | None, str]:
        """The session this request addresses (`/s/<key>/v1/...`, or `/v1/...` with a bearer key), and the
        route under `/v1`."""
        path = self.path.split("?", 1)[0]
        gw = self.server.gateway
        if path.startswith("/s/"):
            _, _, key_route = path.partition("/s/")
            key, _, route = key_route.partition("/")
            return gw.session(key), "/" + route
        auth = self.headers.get("Authorization", "")
        key = auth.removeprefix("Bearer ").strip()
        return gw.session(key), path

    def do_GET(self) -> None:  # noqa: N802 - http.server's spelling
        sess, route = self._session()
        if sess is None:
            self._send(404, _error(404, "no such gateway session", "NotFoundError"))
        elif route.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [
                {"id": sess.policy.model, "object": "model", "owned_by": "rsi-gateway"}]})
        else:
            self._send(404, _error(404, f"no route {route}", "NotFoundError"))

    def do_POST(self) -> None:  # noqa: N802
        t0 = time.monotonic()
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        sess, route = self._session()
        if sess is None:
            self._send(404, _error(404, "no such gateway session (the trial is over, or the key is wrong)",
                                   "NotFoundError"))
            return
        if route.rstrip("/") != "/v1/chat/completions":
            self._send(404, _error(404, f"the recording gateway serves only /v1/chat/completions, not {route}",
                                   "NotFoundError"))
            return
        try:
            body = json.loads(raw or b"{}")
            if not isinstance(body, dict):
                raise ValueError("not a JSON object")
        except ValueError as e:
            self._send(400, _error(400, f"request body is not valid JSON: {e}", "BadRequestError"))
            return
        status, answer = self.server.gateway.handle(sess, body, t0)
        self._send(status, answer)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    gateway: Gateway


class Gateway:
    """One loopback HTTP server for all of a process's trials; each trial opens its own session.

    `transport` replaces the connection to the endpoint (tests pass httpx.MockTransport); `token_ids` asks the
    endpoint for token ids and log-probs (the embedded server and vLLM accept the fields)."""

    def __init__(self, *, host: str = "127.0.0.1", port: int = 0, transport: httpx.BaseTransport | None = None,
                 token_ids: bool = True, timeout: float = 600.0) -> None:
        self.token_ids = token_ids
        self._sessions: dict[str, GatewaySession] = {}
        self._lock = threading.Lock()
        self._http = httpx.Client(timeout=timeout, transport=transport,
                                  limits=httpx.Limits(max_keepalive_connections=64, max_connections=128))
        self._roots: dict[tuple[str, str], str | None] = {}  # (upstream, model) -> adapter dir the endpoint names
        self._digests: dict[tuple[str, float], str] = {}  # (weights path, mtime) -> sha256
        self._server = _Server((host, port), _Handler)
        self._server.gateway = self
        self.host, self.port = str(self._server.server_address[0]), int(self._server.server_address[1])
        self._thread = threading.Thread(target=self._server.serve_forever, args=(0.05,), name="rsi-gateway",
                                        daemon=True)
        self._thread.start()

    @property
    def url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def open_session(self, upstream: str, policy: SessionPolicy, *, api_key: str | None = None) -> GatewaySession:
        key = "rsi-" + secrets.token_hex(12)
        sess = GatewaySession(key=key, base_url=f"{self.url}/s/{key}/v1", upstream=upstream.rstrip("/"),
                              policy=policy, upstream_headers={"Authorization": f"Bearer {api_key}"} if api_key else {},
                              _gateway=self)
        with self._lock:
            self._sessions[key] = sess
        return sess

    def session(self, key: str) -> GatewaySession | None:
        with self._lock:
            return self._sessions.get(key)

    def close_session(self, key: str) -> None:
        with self._lock:
            self._sessions.pop(key, None)

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._http.close()

    def __enter__(self) -> Gateway:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()

    # -- one call ---------------------------------------------------------------------------

    def handle(self, sess: GatewaySession, body: dict[str, Any], t0: float) -> tuple[int, dict[str, Any]]:
        """Check, forward and record one chat completion; return what the harness gets."""
        pol = sess.policy
        with sess.lock:
            index = len(sess.calls)
            spent = sess.usage.prompt_tokens + sess.usage.completion_tokens
            n_ok = sum(1 for c in sess.calls if c.ok)
        call = GatewayCall(index=index, at=_now(), status=0, request=body, pinned_model=pol.model,
                           expected_adapter_sha256=pol.adapter_sha256)
        refusal = self._refusal(body, pol, n_ok, spent)
        if refusal is not None:
            status, message = refusal
            call.status, call.refused = status, message
            kind = "PermissionDeniedError" if status == 403 else "BadRequestError"
            return self._finish(sess, call, t0, status, _error(status, message, kind))
        fwd = dict(body)
        fwd["model"] = pol.model
        for key in ("max_tokens", "max_completion_tokens"):
            asked = body.get(key)
            if key == "max_tokens" or asked is not None:
                given = pol.max_tokens if not isinstance(asked, int) or asked > pol.max_tokens else asked
                if given != asked:
                    call.clamped[key] = [asked if isinstance(asked, int) else None, given]
                fwd[key] = given
        if self.token_ids:
            fwd["return_token_ids"] = True
            fwd["logprobs"] = True
        call.forwarded = {k: v for k, v in fwd.items() if k not in body or body[k] != v}
        timeout = None if pol.deadline is None else max(0.1, pol.deadline - time.monotonic())
        t_up = time.monotonic()
        try:
            resp = self._http.post(f"{sess.upstream}/chat/completions", json=fwd, headers=sess.upstream_headers,
                                   timeout=timeout)
        except httpx.HTTPError as e:
            call.upstream_sec = time.monotonic() - t_up
            call.status, call.refused = 502, f"the model endpoint failed: {type(e).__name__}: {e}"
            return self._finish(sess, call, t0, 502, _error(502, call.refused, "APIConnectionError"))
        call.upstream_sec = time.monotonic() - t_up
        try:
            data = resp.json()
        except ValueError:
            data = {"error": {"message": resp.text[:500], "code": resp.status_code}}
        call.status = resp.status_code
        if resp.status_code != 200 or not isinstance(data, dict):
            return self._finish(sess, call, t0, resp.status_code, data if isinstance(data, dict) else {})
        self._note_tokens(call, data)
        call.response = _without_tokens(data)
        self._note_adapter(sess, call, data)
        return self._finish(sess, call, t0, 200, self._for_harness(body, data))

    @staticmethod
    def _refusal(body: dict[str, Any], pol: SessionPolicy, n_ok: int, spent: int) -> tuple[int, str] | None:
        asked = body.get("model")
        if asked != pol.model:
            return 403, (f"model {asked!r} is not served here: this trial's endpoint is pinned to {pol.model!r} "
                         "(the generation's adapter)")
        if body.get("stream"):
            return 400, "the recording gateway does not stream (stream: true): ask for one complete answer"
        if int(body.get("n") or 1) != 1:
            return 400, "n > 1 is refused: one call, one recorded sample"
        if pol.max_calls is not None and n_ok >= pol.max_calls:
            return 403, f"turn limit reached: {pol.max_calls} model calls (the contract's max_turns, tightened)"
        if pol.deadline is not None and time.monotonic() >= pol.deadline:
            return 403, "agent time limit reached: no more model calls in this trial"
        if pol.token_budget is not None and spent >= pol.token_budget:
            return 403, f"token budget spent: {spent} of {pol.token_budget} tokens"
        return None

    def _note_tokens(self, call: GatewayCall, data: dict[str, Any]) -> None:
        choice = (data.get("choices") or [{}])[0]
        p, c = data.get("prompt_token_ids"), choice.get("token_ids")
        if isinstance(p, list) and isinstance(c, list):
            call.prompt_token_ids, call.completion_token_ids = [int(x) for x in p], [int(x) for x in c]
        lp = choice.get("logprobs")
        content = lp.get("content") if isinstance(lp, dict) else None
        if isinstance(content, list) and all(isinstance(x, dict) and "logprob" in x for x in content):
            call.logprobs = [float(x["logprob"]) for x in content]
        u = data.get("usage") or {}
        details = u.get("prompt_tokens_details") or {}
        call.usage = Usage(prompt_tokens=int(u.get("prompt_tokens") or 0),
                           completion_tokens=int(u.get("completion_tokens") or 0),
                           cached_tokens=int(details.get("cached_tokens") or 0), calls=1)

    def _note_adapter(self, sess: GatewaySession, call: GatewayCall, data: dict[str, Any]) -> None:
        served = str(data.get("model") or "")
        call.served_model = served
        root = self._adapter_root(sess, served)
        if root is not None:
            weights = Path(root) / WEIGHTS
            try:
                k = (str(weights), weights.stat().st_mtime)
                if k not in self._digests:
                    self._digests[k] = hashlib.sha256(weights.read_bytes()).hexdigest()
                call.adapter_sha256, call.adapter_check = self._digests[k], "endpoint-root"
                return
            except OSError:
                pass
        sha8 = sha8_of_serve_name(served)
        expected = sess.policy.adapter_sha256
        if sha8 is not None and expected is not None and expected.startswith(sha8) and served == sess.policy.model:
            call.adapter_sha256, call.adapter_check = expected, "serve-name"

    def _adapter_root(self, sess: GatewaySession, served: str) -> str | None:
        """The adapter directory the endpoint lists as the served model's `root` (vLLM), once per model."""
        k = (sess.upstream, served)
        if k not in self._roots:
            root: str | None = None
            try:
                listing = self._http.get(f"{sess.upstream}/models", headers=sess.upstream_headers, timeout=10).json()
                for m in listing.get("data") or []:
                    r = m.get("root") if isinstance(m, dict) and m.get("id") == served else None
                    if isinstance(r, str) and (Path(r) / WEIGHTS).is_file():
                        root = r
            except (httpx.HTTPError, ValueError, AttributeError):
                root = None
            self._roots[k] = root
        return self._roots[k]

    @staticmethod
    def _for_harness(body: dict[str, Any], data: dict[str, Any]) -> dict[str, Any]:
        """The endpoint's answer less what the gateway asked for and the harness did not."""
        if body.get("return_token_ids") and body.get("logprobs"):
            return data
        out = dict(data)
        choices = [dict(c) for c in data.get("choices") or []]
        if not body.get("return_token_ids"):
            out.pop("prompt_token_ids", None)
            for c in choices:
                c.pop("token_ids", None)
        if not body.get("logprobs"):
            for c in choices:
                c["logprobs"] = None
        out["choices"] = choices
        return out

    @staticmethod
    def _finish(sess: GatewaySession, call: GatewayCall, t0: float, status: int,
                answer: dict[str, Any]) -> tuple[int, dict[str, Any]]:
        call.gateway_sec = round(max(0.0, time.monotonic() - t0 - call.upstream_sec), 6)
        call.upstream_sec = round(call.upstream_sec, 6)
        with sess.lock:
            sess.calls.append(call)
            sess.usage = sess.usage.add(call.usage)
        return status, answer


def _without_tokens(data: dict[str, Any]) -> dict[str, Any]:
    out = {k: v for k, v in data.items() if k != "prompt_token_ids"}
    out["choices"] = [{k: (None if k == "logprobs" else v) for k, v in c.items() if k != "token_ids"}
                      for c in data.get("choices") or []]
    return out


_SHARED: Gateway | None = None
_SHARED_LOCK = threading.Lock()


def shared_gateway() -> Gateway:
    """The process's gateway (started on first use, on a free loopback port)."""
    global _SHARED
    with _SHARED_LOCK:
        if _SHARED is None:
            _SHARED = Gateway()
        return _SHARED


__all__ = ["Gateway", "GatewayCall", "GatewaySession", "SessionPolicy", "read_calls", "sha8_of_serve_name",
           "shared_gateway"]
