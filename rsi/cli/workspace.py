"""`rsi init` and `rsi doctor`."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rsi.cli.common import AddressOpt, ExecutorOpt, WorkspaceOpt, console, errors, print_json, workspace_root


def register(app: typer.Typer) -> None:
    app.command("init")(init)
    app.command("doctor")(doctor)


def init(
    ctx: typer.Context,
    directory: Annotated[Path | None, typer.Argument(
        help="Where to make the workspace (the same as -w; default: the current directory).", show_default=False)
    ] = None,
    tasks: Annotated[bool, typer.Option("--tasks/--no-tasks", help="Copy the starter tasks into tasks/.")] = True,
    harness: Annotated[str | None, typer.Option(
        "--harness", help="The harness config gen-0000 pairs with (harness_configs/NAME.yaml; e.g. mini-swe, an "
                          "external agent behind the recording gateway). Default: default.")] = None,
    model: Annotated[str | None, typer.Option(
        "--model", help="With --endpoint: the model it serves (e.g. vLLM's --served-model-name); becomes rsi.yaml "
                        "base_model and gen-0000's base. Default: SmolLM2-135M-Instruct.")] = None,
    endpoint: Annotated[str | None, typer.Option(
        "--endpoint", help="Your own OpenAI-compatible base URL (e.g. http://127.0.0.1:8000/v1) instead of the "
                           "embedded model; written to the harness config's model.endpoint.")] = None,
    api_key_env: Annotated[str | None, typer.Option(
        "--api-key-env", help="With --endpoint: the environment variable holding its API key (the key itself is "
                              "never written).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the workspace and gen-0000 as JSON.")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Make a workspace (contract, harness config, tasks, generations, .rsi/rsi.db) and register gen-0000.

    On failure the directory is left as it was."""
    from rsi.core.errors import InputError
    from rsi.loop.init import OwnModel, init_workspace

    with errors():
        other = workspace_root(ctx)
        if directory is not None and other is not None and directory.resolve() != other.resolve():
            raise InputError(str(directory), None, f"and -w {other} name two workspaces; give one")
        directory = directory or other or Path(".")
        own = OwnModel.of(model, endpoint, api_key_env)
        with _undone_on_failure(directory):
            m = init_workspace(directory, starter_tasks=tasks, harness=harness, own_model=own)
    if json_out:
        print_json({"workspace": str(directory.resolve()), "generation": m.model_dump(mode="json")})
        return
    console.print(f"workspace ready at [bold]{directory.resolve()}[/]")
    console.print(
        f"{m.id}: base {m.base_model.id}, harness config {m.harness_config.name} "
        f"({m.harness_config.digest[:12]}), contract {m.contract}"
    )
    if own is not None:
        console.print(f"model endpoint: {own.endpoint} (check it with: rsi doctor -w {directory})", highlight=False)


@contextmanager
def _undone_on_failure(directory: Path) -> Iterator[None]:
    """What a failed init made goes again: the directory when it was not there, else the entries it added (an
    existing workspace's own files are never touched)."""
    existed = directory.exists()
    before = set(directory.iterdir()) if directory.is_dir() else set()
    try:
        yield
    except BaseException:
        if not existed and directory.is_dir():
            shutil.rmtree(directory, ignore_errors=True)
        elif directory.is_dir():
            for p in set(directory.iterdir()) - before:
                shutil.rmtree(p, ignore_errors=True) if p.is_dir() and not p.is_symlink() else p.unlink()
        raise


def doctor(
    ctx: typer.Context,
    paths: Annotated[
        list[Path] | None, typer.Argument(help="Task directories: also check the base images their FROM lines name.")
    ] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the checks as JSON.")] = False,
    start: Annotated[bool, typer.Option("--start/--no-start", help="Start the embedded model server to check it "
                                        "(when the generation uses it).")] = True,
    executor: Annotated[str | None, ExecutorOpt] = None,
    address: Annotated[str | None, AddressOpt] = None,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Check the Docker daemon, the base image, the DB and the model endpoint; print the fix for each gap.
    With the `ray` executor also the cluster: its slots, and each node's daemon, base image and endpoint."""
    from rsi.loop.doctor import run_checks

    with errors():
        checks = run_checks(workspace_root(ctx), start_model=start, task_paths=list(paths or []),
                            executor=executor, address=address)
    if json_out:
        print_json([c.__dict__ for c in checks])
    else:
        table = Table(show_header=True, header_style="bold")
        for col in ("check", "status", "detail", "fix"):
            table.add_column(col, overflow="fold")  # a fix is a command to copy: never cut short
        for c in checks:
            table.add_row(c.name, "[green]ok[/]" if c.ok else "[red]missing[/]", c.detail, c.fix or "")
        console.print(table)
    if not all(c.ok for c in checks):
        raise typer.Exit(1)
