"""Serving the viewer: bind the socket first (so `--port 0` gets a free port and the URL is known), then uvicorn."""

from __future__ import annotations

import socket
from collections.abc import Callable
from pathlib import Path

from rsi.view.context import ViewContext


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on (host, port); port 0 takes a free one. OSError (port taken) is the caller's."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(128)
    sock.set_inheritable(True)
    return sock


def url_of(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"http://{shown}:{port}/"


def serve(root: Path | None, host: str, port: int, ready: Callable[[str], None]) -> None:
    """Open the workspace read-only and serve it until Ctrl-C; `ready(url)` is called once the port is bound."""
    import uvicorn

    from rsi.view.app import create_app

    ctx = ViewContext.open(root)
    try:
        app = create_app(ctx)
        sock = bind(host, port)
        ready(url_of(sock))
        server = uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on"))
        server.run(sockets=[sock])
    finally:
        ctx.close()


__all__ = ["bind", "serve", "url_of"]
