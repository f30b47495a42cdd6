"""The `rsi` command: one Typer sub-app per command group."""

from __future__ import annotations

import signal
from pathlib import Path
from typing import Annotated, Any

import typer

from rsi import __version__
from rsi.cli import config as config_cmd
from rsi.cli import cycle as cycle_cmd
from rsi.cli import diff as diff_cmd
from rsi.cli import discover as discover_cmd
from rsi.cli import expand as expand_cmd
from rsi.cli import generations as generations_cmd
from rsi.cli import jobs as jobs_cmd
from rsi.cli import promote as promote_cmd
from rsi.cli import sandbox as sandbox_cmd
from rsi.cli import tasks as tasks_cmd
from rsi.cli import trials as trials_cmd
from rsi.cli import update as update_cmd
from rsi.cli import view as view_cmd
from rsi.cli import workspace as workspace_cmd

app = typer.Typer(
    name="rsi",
    help="Improve an agent model-harness pair generation by generation.",
    no_args_is_help=True,
    pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]},
)


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rsi {__version__}")
        raise typer.Exit()


@app.callback()
def main_callback(
    ctx: typer.Context,
    workspace: Annotated[
        Path | None,
        typer.Option(
            "--workspace", "-w", help="Workspace root (default: $RSI_HOME, else the nearest rsi.yaml upwards)."
        ),
    ] = None,
    version: Annotated[
        bool, typer.Option("--version", callback=_version, is_eager=True, help="Show the version.")
    ] = False,
) -> None:
    ctx.obj = {"workspace": workspace}


workspace_cmd.register(app)
jobs_cmd.register(app)
discover_cmd.register(app)
expand_cmd.register(app)
update_cmd.register(app)
promote_cmd.register(app)
diff_cmd.register(app)
cycle_cmd.register(app)
view_cmd.register(app)
app.add_typer(tasks_cmd.app, name="tasks")
app.add_typer(config_cmd.app, name="config")
app.add_typer(sandbox_cmd.app, name="sandbox")
app.add_typer(trials_cmd.app, name="trials")
app.add_typer(generations_cmd.app, name="generations")
try:
    from rsi.cli import model as model_cmd

    app.add_typer(model_cmd.app, name="model")
except ImportError:  # pragma: no cover - the models layer is optional at import time
    pass


def _sigterm(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _sigterm)
    app()
