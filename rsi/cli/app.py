"""The `rsi` command: one Typer sub-app per command group.

A command imports what it needs when it runs: `main()` registers only the module of the command on the
command line (`rsi diff ...` never imports the cycle's, the model server's or the viewer's code), and the
whole app (every command, for `rsi --help` and for tests) is built on first use of `rsi.cli.app.app`.
"""

from __future__ import annotations

import importlib
import signal
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Annotated, Any

import typer

from rsi import __version__

# command -> the rsi.cli module that registers it, in help order
COMMANDS: dict[str, str] = {
    "init": "workspace", "doctor": "workspace", "run": "jobs", "jobs": "jobs", "discover": "discover",
    "expand": "expand", "attribution": "expand", "update": "update", "promote": "promote", "rollback": "promote",
    "diff": "diff", "cycle": "cycle", "demo": "cycle", "view": "view",
}
# command group -> the rsi.cli module whose `app` it is
GROUPS: dict[str, str] = {"tasks": "tasks", "config": "config", "sandbox": "sandbox", "trials": "trials",
                          "generations": "generations", "model": "model"}
OPTIONS_WITH_VALUE = ("--workspace", "-w")


def _version(value: bool) -> None:
    if value:
        typer.echo(f"rsi {__version__}")
        raise typer.Exit()


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


def build(only: str | None = None) -> typer.Typer:
    """The app with every command, or with only `only` (a command or group name; "": none) when given."""
    app = typer.Typer(
        name="rsi",
        help="Improve an agent model-harness pair generation by generation.",
        no_args_is_help=True,
        pretty_exceptions_enable=False,
        context_settings={"help_option_names": ["-h", "--help"]},
    )
    app.callback()(main_callback)
    every = list(dict.fromkeys(COMMANDS.values()))
    wanted = every if only is None else [m for m in every if COMMANDS.get(only) == m]
    for mod in wanted:
        importlib.import_module(f"rsi.cli.{mod}").register(app)
    for name, mod in GROUPS.items():
        if only is not None and only != name:
            continue
        try:
            app.add_typer(importlib.import_module(f"rsi.cli.{mod}").app, name=name)
        except ImportError:  # pragma: no cover - the models layer is optional at import time
            if name != "model":
                raise
    return app


def command_of(argv: Sequence[str]) -> str | None:
    """The command or group `argv` runs (None: every command, for --help or a name rsi does not know; "": none)."""
    skip = False
    for arg in argv:
        if skip:
            skip = False
        elif arg in OPTIONS_WITH_VALUE:
            skip = True
        elif arg.startswith("-"):
            if arg == "--version":
                return ""  # no command needed to print the version
            if arg in ("--help", "-h"):
                return None
        else:
            return arg if arg in COMMANDS or arg in GROUPS else None
    return None


_app: typer.Typer | None = None


def __getattr__(name: str) -> Any:
    """`rsi.cli.app.app`: the whole app, built once on first use."""
    global _app
    if name == "app":
        if _app is None:
            _app = build()
        return _app
    raise AttributeError(name)


def _sigterm(_signum: int, _frame: Any) -> None:
    raise KeyboardInterrupt


def main() -> None:
    signal.signal(signal.SIGTERM, _sigterm)
    build(command_of(sys.argv[1:]))(prog_name="rsi")
