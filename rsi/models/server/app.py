"""The embedded server's HTTP side: vLLM's OpenAI-compatible API subset over the standard library.

Routes: `GET /v1/models`, `POST /v1/chat/completions`, `POST /v1/load_lora_adapter`,
`POST /v1/unload_lora_adapter` (also `GET /health`). Errors use OpenAI's shape
`{"error": {"message", "type", "code"}}` with proper 4xx codes. A ThreadingHTTPServer suffices: each
connection gets a thread that waits on the engine, which serialises (and batches) the model work.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from rsi.models.server.engine import Engine, EngineError, request_from_body

log = logging.getLogger("rsi.models.server")

_ERROR_TYPES = {
    400: "BadRequestError",
    404: "NotFoundError",
    405: "MethodNotAllowed",
    500: "InternalServerError",
}
MAX_BODY = 16 * 1024 * 1024


def error_body(status: int, message: str) -> dict[str, Any]:
    return {"error": {"message": message, "type": _ERROR_TYPES.get(status, "Error"), "code": status}}


class _Handler(BaseHTTPRequestHandler):
    server_version = "rsi-embedded/1"
    protocol_version = "HTTP/1.1"  # keep-alive: the client reuses one connection
    engine: Engine  # set on the subclass made by make_server

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 — stdlib signature
        log.info("%s %s", self.address_string(), format % args)

    def _send(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None) -> None:
        data = json.dumps(body).encode()
        self.send_response(status)
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def _body(self) -> Any:
        length = int(self.headers.get("Content-Length") or 0)
        if length > MAX_BODY:
            raise EngineError(f"request body larger than {MAX_BODY} bytes")
        raw = self.rfile.read(length) if length else b""
        try:
            return json.loads(raw or b"null")
        except ValueError as e:
            raise EngineError(f"request body is not valid JSON: {e}") from None

    def do_GET(self) -> None:  # noqa: N802 — stdlib naming
        path = self.path.split("?", 1)[0].rstrip("/")
        if path == "/v1/models":
            created = int(time.time())
            data = [
                {
                    "id": mid,
                    "object": "model",
                    "created": created,
                    "owned_by": "rsi",
                    "root": self.engine.model_id if mid != self.engine.model_id else mid,
                    "parent": self.engine.model_id if mid != self.engine.model_id else None,
                }
                for mid in self.engine.model_ids()
            ]
            self._send(200, {"object": "list", "data": data})
        elif path in ("/health", "/v1/health"):
            self._send(200, {"status": "ok"})
        else:
            self._send(404, error_body(404, f"no route GET {path}"))

    def do_POST(self) -> None:  # noqa: N802 — stdlib naming
        path = self.path.split("?", 1)[0].rstrip("/")
        routes = {
            "/v1/chat/completions": self._chat,
            "/v1/load_lora_adapter": self._load,
            "/v1/unload_lora_adapter": self._unload,
        }
        route = routes.get(path)
        try:
            if route is None:
                self._body()  # drain, so keep-alive stays in sync
                raise EngineError(f"no route POST {path}", status=404)
            route(self._body())
        except EngineError as e:
            self._send(e.status, error_body(e.status, e.message))
        except Exception as e:  # noqa: BLE001 — a server answers 500 rather than dropping the socket
            log.exception("request failed")
            self._send(500, error_body(500, f"{type(e).__name__}: {e}"))

    def _chat(self, body: Any) -> None:
        req = request_from_body(body)
        res = self.engine.generate(req)
        message: dict[str, Any] = {"role": "assistant", "content": res.text}
        if res.tool_calls:
            message["tool_calls"] = res.tool_calls
        self._send(
            200,
            {
                "id": f"chatcmpl-{uuid.uuid4().hex}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": req.model,
                "choices": [
                    {
                        "index": 0,
                        "message": message,
                        "finish_reason": res.finish_reason,
                        "stop_reason": res.stop_reason,  # vLLM's field: the stop string that matched
                        "logprobs": None,
                    }
                ],
                "usage": {
                    "prompt_tokens": res.prompt_tokens,
                    "completion_tokens": res.completion_tokens,
                    "total_tokens": res.prompt_tokens + res.completion_tokens,
                },
            },
            # Time the request waited for the engine: the harness does not charge it to the agent.
            headers={"X-Queue-Seconds": f"{res.queue_sec:.3f}"},
        )

    @staticmethod
    def _lora_name(body: Any) -> str:
        if not isinstance(body, dict) or not isinstance(body.get("lora_name"), str) or not body["lora_name"]:
            raise EngineError("'lora_name' is required and must be a non-empty string")
        return str(body["lora_name"])

    def _load(self, body: Any) -> None:
        name = self._lora_name(body)
        path = body.get("lora_path")
        if not isinstance(path, str) or not path:
            raise EngineError("'lora_path' is required and must be a non-empty string")
        self.engine.load_adapter(name, path)
        self._send(200, {"status": "ok", "message": f"Success: LoRA adapter '{name}' added successfully."})

    def _unload(self, body: Any) -> None:
        name = self._lora_name(body)
        self.engine.unload_adapter(name)
        self._send(200, {"status": "ok", "message": f"Success: LoRA adapter '{name}' removed successfully."})


def make_server(engine: Engine, host: str, port: int) -> ThreadingHTTPServer:
    handler = type("Handler", (_Handler,), {"engine": engine})
    server = ThreadingHTTPServer((host, port), handler)
    server.daemon_threads = True
    return server


def serve(engine: Engine, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Serve until SIGTERM/SIGINT."""
    server = make_server(engine, host, port)

    def _shutdown(signum: int, frame: Any) -> None:
        threading.Thread(target=server.shutdown, daemon=True).start()

    signal.signal(signal.SIGTERM, _shutdown)
    signal.signal(signal.SIGINT, _shutdown)
    log.info("serving %s on http://%s:%d/v1", ", ".join(engine.model_ids()), host, port)
    try:
        server.serve_forever(poll_interval=0.2)
    finally:
        server.server_close()


__all__ = ["error_body", "make_server", "serve"]
