"""`rsi run` (an ad-hoc job) and `rsi jobs list|show`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from rsi.cli.common import console, err_console, errors, open_context, print_json
from rsi.core.trial import TrialResult
from rsi.exec.trial import TrialPlan
from rsi.loop.run import Progress as RunProgress
from rsi.loop.run import RunRequest, run_job
from rsi.report.jobs import job_json, summarize

jobs_app = typer.Typer(help="Jobs: list and show.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.add_typer(jobs_app, name="jobs")


class _Bar(RunProgress):
    def __init__(self, progress: Progress) -> None:
        self.p = progress
        self.task_id = progress.add_task("trials", total=None, passed=0)
        self.passed = 0

    def start(self, total: int, done: int, job_id: str) -> None:
        self.p.update(self.task_id, total=total, completed=done, description=job_id)

    def trial_finished(self, plan: TrialPlan, result: TrialResult) -> None:
        self.passed += int(result.passed)
        self.p.update(self.task_id, advance=1, passed=self.passed)


def run(
    ctx: typer.Context,
    paths: Annotated[list[Path] | None, typer.Argument(help="Task directories or directories of tasks.")] = None,
    agent: Annotated[
        str | None,
        typer.Option("--agent", "-a", help="oracle | nop | harness (default: oracle, or the job's on --resume)"),
    ] = None,
    k: Annotated[int, typer.Option("-k", "--attempts", help="Attempts per task.")] = 1,
    n: Annotated[int, typer.Option("-n", "--concurrency", help="Trials at a time.")] = 1,
    gen: Annotated[str | None, typer.Option("--gen", help="Generation (default: the current one).")] = None,
    resume: Annotated[str | None, typer.Option("--resume", help="Finish the unfinished trials of JOB.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the table.")] = False,
) -> None:
    """Run every task x K attempts in Docker sandboxes, N at a time, and summarise. Exit 0 whatever the rewards."""
    req = RunRequest(paths=list(paths or []), agent=agent, attempts=k, concurrency=n, generation=gen, resume=resume)
    with errors():
        wctx = open_context(ctx)
        with Progress(
            TextColumn("[bold]{task.description}"),
            BarColumn(),
            MofNCompleteColumn(),
            TextColumn("passed {task.fields[passed]}"),
            TimeElapsedColumn(),
            console=err_console,
            transient=json_out,
            disable=not err_console.is_terminal,
        ) as progress:
            outcome = run_job(wctx, req, _Bar(progress))
    if json_out:
        print_json(job_json(outcome.job, outcome.trials))
    else:
        render_summary(outcome.job, outcome.trials)
    if outcome.interrupted:
        err_console.print(f"interrupted; finish it with: rsi run --resume {outcome.job.id}")
        raise typer.Exit(130)


def render_summary(job, trials) -> None:  # type: ignore[no-untyped-def]
    s = summarize(job, trials)
    table = Table(title=f"{job.id}  agent={job.agent}  generation={job.generation}")
    for c in ("task", "passes", "mean reward", "errors"):
        table.add_column(c)
    for t in s.tasks:
        mean = f"{t.mean_reward:.2f}" if t.mean_reward is not None else "-"
        errs = ", ".join(f"{k}×{v}" for k, v in sorted(t.errors.items())) or ""
        table.add_row(t.task, f"{t.passes}/{t.attempts}", mean, errs)
    console.print(table)
    rates = f"pass@1 [bold]{s.pass_at_1:.3f}[/]"
    if s.k > 1:
        rates += f"   pass@{s.k} [bold]{s.pass_at_k:.3f}[/]"
    where = Path(trials[0].trial_dir).parent if trials else "-"
    console.print(f"{rates}   trials {s.trials}   infra errors {s.infra_errors}")
    console.print(f"trial dirs: {where}", highlight=False)


@jobs_app.command("list")
def list_jobs(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """List recent jobs."""
    with errors():
        store = open_context(ctx).store
        rows = [(j, summarize(j, store.trials(j.id))) for j in store.list_jobs()]
    if json_out:
        print_json([
            {"job": j.id, "status": j.status, "agent": j.agent, "generation": j.generation, "trials": s.trials,
             "pass_at_1": s.pass_at_1, "created_at": j.created_at}
            for j, s in rows
        ])
        return
    table = Table()
    for c in ("job", "status", "agent", "generation", "trials", "pass@1"):
        table.add_column(c)
    for j, s in rows:
        table.add_row(j.id, j.status, j.agent, j.generation or "-", str(s.trials), f"{s.pass_at_1:.3f}")
    console.print(table)


@jobs_app.command("show")
def show_job(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="Job id.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show a job's summary (the same as at the end of `rsi run`)."""
    with errors():
        store = open_context(ctx).store
        row = store.get_job(job)
        trials = store.trials(row.id)
    if json_out:
        print_json(job_json(row, trials))
    else:
        render_summary(row, trials)
