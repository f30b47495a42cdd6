"""`rsi tasks list|show|validate|import`: read, check and import Harbor-format tasks."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from rsi.cli.common import WorkspaceOpt, console, errors, print_json, workspace_root
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
    state: Annotated[str | None, typer.Option(
        "--state", help="active | retired (on disk), or candidate | rejected (discovery's, from the database).")
    ] = None,
    split: Annotated[str | None, typer.Option("--split", help="train | holdout.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """List tasks with family, template, split, difficulty, state, generator, probe pass rate and digest."""
    from rsi.core.errors import InputError
    from rsi.store.files import load_tasks

    with errors():
        if state not in (None, "active", "retired", "candidate", "rejected"):
            raise InputError("--state", None, f"'{state}' is not one of active, retired, candidate, rejected")
        if split not in (None, "train", "holdout"):
            raise InputError("--split", None, f"'{split}' is not one of train, holdout")
        tasks = load_tasks(_paths(ctx, paths))
        db = _task_rows(ctx)
        rows: list[dict[str, Any]] = []
        for t in tasks:
            r = db.get(t.digest)
            meta = t.spec.metadata.rsi
            rows.append({"name": t.name, "family": t.family, "template": meta.template, "split": t.split,
                         "difficulty": meta.difficulty,
                         "state": r.state if r else "active", "state_reason": r.state_reason if r else None,
                         "generator": meta.generator, "probe_pass_rate": r.probe_pass_rate if r else None,
                         "probe_trials": r.probe_trials if r else 0, "digest": t.digest, "path": t.path})
        if state in ("candidate", "rejected"):
            on_disk = {t.digest for t in tasks}
            rows += [{"name": r.name, "family": r.family, "template": _template_of(r.path), "split": r.split,
                      "difficulty": r.difficulty,
                      "state": r.state, "state_reason": r.state_reason, "generator": r.generator,
                      "probe_pass_rate": r.probe_pass_rate, "probe_trials": r.probe_trials, "digest": r.digest,
                      "path": r.path} for r in db.values() if r.state == state and r.digest not in on_disk]
        rows = [r for r in rows if (state is None or r["state"] == state) and (split is None or r["split"] == split)]
    if json_out:
        print_json(rows)
        return
    table = Table(title=f"{len(rows)} tasks")
    for c in ("name", "family", "template", "split", "difficulty", "state", "generator", "probe pass", "digest"):
        table.add_column(c)
    for r in rows:
        rate = "-" if r["probe_pass_rate"] is None else f"{r['probe_pass_rate']:.2f} ({r['probe_trials']})"
        table.add_row(str(r["name"]), str(r["family"]), str(r["template"] or "-"), str(r["split"]),
                      str(r["difficulty"]), str(r["state"]), str(r["generator"] or "-"), rate, str(r["digest"])[:12])
    console.print(table)


def _template_of(path: str) -> str | None:
    """The template id in a task directory's task.toml, if it is still there and has one."""
    import tomllib

    try:
        raw = tomllib.loads((Path(path) / "task.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    tpl = raw.get("metadata", {}).get("rsi", {}).get("template")
    return str(tpl) if tpl else None


def _task_rows(ctx: typer.Context) -> dict[str, Any]:
    """The database's task rows by digest, when there is a workspace (an empty map otherwise)."""
    from rsi.core.errors import RsiError
    from rsi.loop.context import WorkspaceContext

    try:
        wctx = WorkspaceContext.open(workspace_root(ctx))
    except RsiError:
        return {}
    return {r.digest: r for r in wctx.store.task_rows()}


def task_dir(ctx: typer.Context, given: Path) -> Path:
    """A task as the user names it: a directory (relative paths against -w first when -w is given, else the
    current directory first, then the workspace root), or a name as `rsi tasks list` prints it (a task of the
    workspace's tasks/, else a discovery candidate the database knows). Unresolved: the path as given, so loading
    it names the missing file."""
    import tomllib

    explicit = workspace_root(ctx)
    if given.is_absolute():
        return given
    ws = Workspace.locate(explicit)
    roots = [ws.root, Path.cwd()] if explicit is not None else [Path.cwd(), ws.root]
    for r in roots:
        if (r / given / "task.toml").is_file():
            return r / given
    name = str(given)
    if (ws.tasks_dir / name / "task.toml").is_file():
        return ws.tasks_dir / name
    for toml in sorted(ws.tasks_dir.rglob("task.toml")) if ws.tasks_dir.is_dir() else []:
        try:
            if tomllib.loads(toml.read_text()).get("task", {}).get("name") == name:
                return toml.parent
        except (OSError, tomllib.TOMLDecodeError):
            continue
    for row in _task_rows(ctx).values():
        if row.name == name and row.path and (Path(row.path) / "task.toml").is_file():
            return Path(row.path)
    return roots[0] / given


def resolve_path(ctx: typer.Context, given: Path) -> Path:
    """A task or a directory of tasks as the user names it (`rsi run PATH`): an existing directory (relative paths
    against -w first when -w is given, else the current directory first, then the workspace root), else a task's
    name as `rsi tasks list` prints it (`task_dir`)."""
    if given.is_absolute():
        return given
    explicit = workspace_root(ctx)
    ws = Workspace.locate(explicit)
    for r in [ws.root, Path.cwd()] if explicit is not None else [Path.cwd(), ws.root]:
        if (r / given).is_dir():
            return r / given
    return task_dir(ctx, given)


@app.command()
def show(
    ctx: typer.Context,
    task: Annotated[Path, typer.Argument(
        help="A task's name as `rsi tasks list` prints it, or its directory (relative: against -w when given).")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Show one task: its instruction, limits and metadata."""
    from rsi.store.files import load_task

    with errors():
        t = load_task(task_dir(ctx, task))
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
def validate(
    ctx: typer.Context,
    paths: PathsArg = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Check that tasks parse and have every required file. Exit 2 on the first bad one; writes nothing."""
    from rsi.store.files import load_tasks

    with errors():
        tasks = load_tasks(_paths(ctx, paths))
    missing = [t.name for t in tasks if not t.has_solution]
    if json_out:
        print_json({"valid": len(tasks), "tasks": [{"name": t.name, "path": t.path, "digest": t.digest,
                                                    "has_solution": t.has_solution} for t in tasks]})
        return
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
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
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
