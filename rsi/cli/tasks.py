"""`rsi tasks list|show|validate|import`: read, check and import Harbor-format tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from rsi.cli.common import console, errors, print_json, workspace_root
from rsi.store.paths import Workspace

app = typer.Typer(help="Read and check Harbor-format tasks.", no_args_is_help=True)

PathsArg = Annotated[
    list[Path] | None,
    typer.Argument(help="Task directories, or directories of tasks (default: the workspace's tasks/)."),
]


def _paths(ctx: typer.Context, paths: list[Path] | None) -> list[Path]:
    return paths or [Workspace.locate(workspace_root(ctx)).tasks_dir]


@app.command("list")
def list_(
    ctx: typer.Context,
    paths: PathsArg = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List tasks with family, split, difficulty and digest."""
    from rsi.store.files import load_tasks

    with errors():
        tasks = load_tasks(_paths(ctx, paths))
    if json_out:
        print_json([
            {"name": t.name, "family": t.family, "split": t.split, "difficulty": t.spec.metadata.rsi.difficulty,
             "digest": t.digest, "path": t.path}
            for t in tasks
        ])
        return
    table = Table(title=f"{len(tasks)} tasks")
    for c in ("name", "family", "split", "difficulty", "digest"):
        table.add_column(c)
    for t in tasks:
        table.add_row(t.name, t.family, t.split, str(t.spec.metadata.rsi.difficulty), t.digest[:12])
    console.print(table)


@app.command()
def show(
    path: Annotated[Path, typer.Argument(help="A task directory.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show one task: its instruction, limits and metadata."""
    from rsi.store.files import load_task

    with errors():
        t = load_task(path)
    if json_out:
        print_json(t.model_dump(mode="json"))
        return
    e = t.spec.environment
    console.print(f"[bold]{t.name}[/]  family={t.family} split={t.split} digest={t.digest[:12]}")
    console.print(
        f"agent timeout {t.spec.agent.timeout_sec:g}s, verifier timeout {t.spec.verifier.timeout_sec:g}s, "
        f"cpus {e.cpus:g}, memory {e.memory_mb} MB, pids {e.pids}, network {t.spec.network()}"
    )
    console.rule("instruction")
    console.print(t.instruction.strip(), markup=False, highlight=False)


@app.command()
def validate(ctx: typer.Context, paths: PathsArg = None) -> None:
    """Check that tasks parse and have every required file. Exit 2 on the first bad one; writes nothing."""
    from rsi.store.files import load_tasks

    with errors():
        tasks = load_tasks(_paths(ctx, paths))
    missing = [t.name for t in tasks if not t.has_solution]
    console.print(f"[green]{len(tasks)} task(s) valid[/]")
    for name in missing:
        console.print(f"[yellow]note:[/] {name} has no solution/solve.sh (the oracle cannot run it)")


@app.command("import")
def import_(
    ctx: typer.Context,
    src: Annotated[Path, typer.Argument(help="A Terminal-Bench 1 or Harbor task, or a directory of them.")],
    fmt: Annotated[str | None, typer.Option("--format", help="tb1 | harbor (default: detected).")] = None,
    into: Annotated[Path | None, typer.Option("--into", help="Destination (default: the workspace's tasks/).")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Convert Terminal-Bench 1 tasks to Harbor format (or copy Harbor tasks), checked, with their origin."""
    from rsi.core.errors import InputError
    from rsi.store.task_import import import_tasks

    with errors():
        if fmt not in (None, "tb1", "harbor"):
            raise InputError("--format", None, f"'{fmt}' is not one of tb1, harbor")
        tasks = import_tasks(src, into or Workspace.locate(workspace_root(ctx)).tasks_dir, fmt)  # type: ignore[arg-type]
    if json_out:
        print_json([{"name": t.name, "path": t.path, "digest": t.digest, "origin": t.spec.metadata.rsi.origin}
                    for t in tasks])
        return
    for t in tasks:
        console.print(f"imported {t.name} -> {t.path} ({t.digest[:12]})", highlight=False)
