"""What every command shares: consoles, the workspace option, error handling, JSON output."""

from __future__ import annotations

import json
import tempfile
import traceback
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import typer
from rich.console import Console

from rsi.core.errors import RsiError

console = Console()
err_console = Console(stderr=True)


@contextmanager
def errors() -> Iterator[None]:
    """Turn any RsiError into one line on the error console and its exit code."""
    try:
        yield
    except RsiError as e:
        err_console.print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        raise typer.Exit(e.exit_code) from None
    except (typer.Exit, typer.Abort, KeyboardInterrupt):
        raise
    except Exception as e:  # noqa: BLE001 - a bug: one line for the user, the traceback in a file
        log = Path(tempfile.gettempdir()) / "rsi-last-error.log"
        log.write_text(traceback.format_exc())
        err_console.print(f"[bold red]error:[/] internal error: {type(e).__name__}: {e} (traceback in {log})",
                          highlight=False, soft_wrap=True)
        raise typer.Exit(1) from None


def workspace_root(ctx: typer.Context) -> Path | None:
    root = ctx.find_root()
    obj = root.obj if isinstance(root.obj, dict) else {}
    return obj.get("workspace")


def open_context(ctx: typer.Context) -> Any:
    from rsi.loop.context import WorkspaceContext

    return WorkspaceContext.open(workspace_root(ctx))


ExecutorOpt = typer.Option("--executor", help="Where trials run: local | ray (default: rsi.yaml `executor:`).")
AddressOpt = typer.Option("--address", help="With --executor ray: the cluster (default: RAY_ADDRESS, else the "
                          "cluster this machine joined).")


def use_executor(wctx: Any, name: str | None, address: str | None) -> None:
    """`--executor NAME [--address ADDR]` over the workspace's `executor:` settings (an unknown name
    lists the known ones)."""
    if name is None and address is None:
        return
    from rsi.core.settings import ExecutorSettings
    from rsi.exec.local import EXECUTORS

    cur = wctx.settings.executor
    chosen = ExecutorSettings(name=name or cur.name, address=address or cur.address)
    EXECUTORS.get(chosen.name)
    wctx.settings = wctx.settings.model_copy(update={"executor": chosen})


def print_json(obj: Any) -> None:
    typer.echo(json.dumps(obj, indent=2, default=str))


def harness_config_file(wctx: Any, name: str) -> Path:
    """`--harness NAME`: harness_configs/NAME.yaml of the workspace (a path is taken as it is)."""
    from rsi.core.errors import InputError

    p = Path(name)
    path = p if p.suffix in (".yaml", ".yml") else wctx.harness_config_path(name)
    if not path.is_file():
        known = sorted(f.stem for f in wctx.ws.harness_configs_dir.glob("*.yaml"))
        raise InputError("--harness", None, f"no harness config {path} (known: {', '.join(known) or 'none'})")
    return Path(path)
