"""`rsi view`: the read-only web viewer over the workspace (generations, jobs, trials, compare, diff)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from rsi.cli.common import WorkspaceOpt, console, errors, workspace_root
from rsi.core.errors import ConfigError


def register(app: typer.Typer) -> None:
    app.command("view")(view)


def view(
    ctx: typer.Context,
    port: Annotated[int, typer.Option("--port", "-p", help="Port to listen on (0: any free port).")] = 8000,
    host: Annotated[str, typer.Option("--host", help="Address to listen on (127.0.0.1: this machine only).")]
    = "127.0.0.1",
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Serve a local web viewer over this workspace: generations and their gates, jobs, trials (filters, search),
    every step of a trajectory, a task x generation grid with step-aligned diffs, and the diff report. The store is
    opened read-only, so it is safe beside a running job."""
    with errors():
        try:
            from rsi.view.serve import serve
        except ImportError as e:
            raise ConfigError(f"`rsi view` needs fastapi and uvicorn ({e}); pip install 'rsi[model]'") from None

        def ready(url: str) -> None:
            console.print(f"rsi view: open {url}  (read-only; Ctrl-C stops)", highlight=False, soft_wrap=True)

        try:
            serve(workspace_root(ctx), host, port, ready)
        except OSError as e:
            raise ConfigError(f"cannot listen on {host}:{port}: {e.strerror or e}; pick another --port "
                              "(0 takes a free one)") from None
        except KeyboardInterrupt:
            pass
