"""`rsi run` (an ad-hoc job) and `rsi jobs list|show`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from rsi.cli.common import (
    AddressOpt,
    ExecutorOpt,
    WorkspaceOpt,
    console,
    err_console,
    errors,
    harness_config_file,
    open_context,
    print_json,
    use_executor,
)
from rsi.cli.progress import TrialBar, progress
from rsi.cli.tracking import ReportToOpt, close_tracking, open_tracking, track_run

jobs_app = typer.Typer(help="Jobs: list and show.", no_args_is_help=True)


def register(app: typer.Typer) -> None:
    app.command("run")(run)
    app.add_typer(jobs_app, name="jobs")


def run(
    ctx: typer.Context,
    paths: Annotated[list[Path] | None, typer.Argument(
        help="Task directories, directories of tasks, or task names as `rsi tasks list` prints them (relative "
             "paths against -w first when -w is given).")] = None,
    agent: Annotated[
        str | None,
        typer.Option("--agent", "-a", help="Who attempts the tasks (required, except with --harness, --model, "
                                            "--endpoint or --resume): harness (the model through the generation's "
                                            "harness) | oracle (the "
                                            "reference solution) | nop (does nothing) | oracle-replay (the "
                                            "reference as harness turns) | hinted (the model with a hint) | "
                                            "known_wrong (a discovery candidate's wrong solution). On --resume: "
                                            "the job's."),
    ] = None,
    variant: Annotated[
        str | None,
        typer.Option("--variant", help="The arm's variant: hint-1 | hint-2 | hint-3 for --agent hinted (default "
                                       "hint-3: the whole reference as the hint); plain | look | careful for "
                                       "--agent oracle-replay (default plain)."),
    ] = None,
    k: Annotated[int, typer.Option("-k", "--attempts", help="Attempts per task.")] = 1,
    n: Annotated[int, typer.Option("-n", "--concurrency", help="Trials at a time.")] = 1,
    gen: Annotated[
        list[str] | None,
        typer.Option("--gen", help="Generation (default: the current one); repeat to run several side by side."),
    ] = None,
    config: Annotated[
        list[Path] | None,
        typer.Option("--config", help="Harness config file instead of the generation's; repeat for side by side."),
    ] = None,
    harness: Annotated[
        list[str] | None,
        typer.Option("--harness", help="Harness config by name (harness_configs/NAME.yaml; e.g. mini-swe, an "
                                       "external agent behind the recording gateway); implies --agent harness; "
                                       "repeat for side by side."),
    ] = None,
    model: Annotated[
        str | None,
        typer.Option("--model", help="For this job, the model every request names (e.g. what vLLM serves as "
                                     "--served-model-name). Default: the generation's (its adapter, else rsi.yaml "
                                     "base_model)."),
    ] = None,
    endpoint: Annotated[
        str | None,
        typer.Option("--endpoint", help="For this job, an OpenAI-compatible base URL (e.g. "
                                        "http://127.0.0.1:8000/v1) instead of the harness config's model.endpoint."),
    ] = None,
    budget: Annotated[float | None, typer.Option("--budget", help="Stop when this much is spent (see --unit).")] = None,
    unit: Annotated[str, typer.Option("--unit", help="Budget unit: trials | tokens | minutes.")] = "trials",
    resume: Annotated[str | None, typer.Option("--resume", help="Finish the unfinished trials of JOB.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of the table.")] = False,
    report_to: Annotated[list[str] | None, ReportToOpt] = None,
    executor: Annotated[str | None, ExecutorOpt] = None,
    address: Annotated[str | None, AddressOpt] = None,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Run every arm x task x K attempts in Docker sandboxes, N at a time, and summarise per arm.

    An arm is (agent, generation, harness config): `--gen A --gen B` or `--config X --config Y` run
    side by side on the same tasks. Exit 0 whatever the rewards; 130 on Ctrl-C; 3 when the job
    stopped on repeated endpoint or daemon failures."""
    from rsi.core.errors import InputError
    from rsi.loop.run import RunRequest, run_job
    from rsi.report.jobs import job_json

    with errors():
        model_given = model is not None or endpoint is not None
        if agent is None and not harness and not resume and not model_given:
            raise InputError("--agent", None, "say who attempts the tasks: harness (the model) | oracle | nop | "
                                              "oracle-replay | hinted | known_wrong")
        wctx = open_context(ctx)
        from rsi.cli.tasks import resolve_path

        paths = [resolve_path(ctx, p) for p in paths or []]
        configs = list(config or []) + [harness_config_file(wctx, name) for name in harness or []]
        implied = "harness" if harness or (model_given and not resume) else None
        req = RunRequest(paths=list(paths or []), agent=agent or implied, variant=variant,
                         attempts=k, concurrency=n, generations=list(gen or []), configs=configs, resume=resume,
                         budget=budget, budget_unit=unit, model=model, endpoint=endpoint)
        use_executor(wctx, executor, address)
        tracking = open_tracking(wctx, report_to)
        try:
            with progress(json_out) as bars:
                outcome = run_job(wctx, req, TrialBar(bars, "trials"))
            track_run(tracking, wctx, outcome.job, outcome.trials, outcome.interrupted)
        finally:
            close_tracking(tracking, json_out)
    if json_out:
        print_json(job_json(outcome.job, outcome.trials))
    else:
        render_summary(outcome.job, outcome.trials)
    if outcome.interrupted:
        if outcome.stop == "cancelled":
            err_console.print(f"interrupted; finish it with: rsi run --resume {outcome.job.id}")
            raise typer.Exit(130)
        err_console.print(f"[bold]stopped:[/] {outcome.reason}", highlight=False, soft_wrap=True)
        if outcome.stop == "breaker":
            raise typer.Exit(3)


def render_summary(job, trials) -> None:  # type: ignore[no-untyped-def]
    from rsi.report.jobs import integrity_text, summarize

    s = summarize(job, trials)
    console.print(f"[bold]{job.id}[/]  {job.status}  {len(s.arms)} arm(s)", highlight=False)
    for a in s.arms:
        table = Table(title=f"{a.label}  [dim]{a.arm_id}[/]", title_justify="left")
        for c in ("task", "passes", "mean reward", "errors"):
            table.add_column(c)
        for t in a.tasks:
            mean = f"{t.mean_reward:.2f}" if t.mean_reward is not None else "-"
            errs = ", ".join(f"{k}×{v}" for k, v in sorted(t.errors.items())) or ""
            table.add_row(t.task + (" [dim](holdout)[/]" if t.holdout else ""), f"{t.passes}/{t.attempts}", mean, errs)
        console.print(table)
        rates = f"pass@1 [bold]{a.pass_at_1:.3f}[/]"
        if s.k > 1:
            rates += f"   pass@{s.k} [bold]{a.pass_at_k:.3f}[/]"
        console.print(f"{rates}   trials {a.trials}   infra errors {a.infra_errors}")
        console.print(f"integrity: {integrity_text(a.integrity)}", highlight=False)
        if a.role != "model":
            console.print("[yellow]control: evidence about the tasks, not a model score[/]")
    if len(s.arms) > 1:
        rates = f"pass@1 [bold]{s.pass_at_1:.3f}[/]" + (f"   pass@{s.k} [bold]{s.pass_at_k:.3f}[/]" if s.k > 1 else "")
        console.print(f"job: {rates}   counting {s.counts}", highlight=False)
    if s.holdout_tasks:
        console.print(f"[yellow]{s.holdout_tasks} holdout task(s): sealed, these results never feed the loop[/]")
    if job.interrupted_reason and job.status == "interrupted":
        console.print(f"stopped: {job.interrupted_reason}", highlight=False)
    where = Path(trials[0].trial_dir).parent if trials else "-"
    console.print(f"trial dirs: {where}", highlight=False)


@jobs_app.command("list")
def list_jobs(
    ctx: typer.Context,
    all_jobs: Annotated[bool, typer.Option("--all", help="Also the child jobs of discover, expand, promote and "
                                           "cycle jobs (their stages).")] = False,
    limit: Annotated[int, typer.Option("--limit", help="How many, newest first.")] = 50,
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """List recent jobs: runs and phase jobs (discover, expand, promote, cycle) with the trials under them."""
    from rsi.report.jobs import status_text

    with errors():
        store = open_context(ctx).store
        rows = [(j, *_figures(store, j)) for j in store.list_jobs(limit, top_level=not all_jobs)]
    if json_out:
        print_json([
            {"job": j.id, "kind": j.kind, "parent": j.parent_job, "status": j.status, "shown": status_text(j),
             "agent": j.agent,
             "generation": j.generation, "trials": n, "pass_at_1": p1, "counts": c, "created_at": j.created_at}
            for j, n, p1, c in rows
        ])
        return
    # a listing like `docker ps`: no column rules, so a full job id (what `--resume` and `jobs show`
    # take, never cut short) and the rest fit 80 columns
    table = Table(box=None, padding=(0, 1, 0, 0), pad_edge=False, header_style="bold underline")
    table.add_column("job", no_wrap=True, min_width=max((len(j.id) for j, *_ in rows), default=3))
    for c in ("kind", "status", "agent", "gen", "trials", "pass@1"):
        table.add_column(c, no_wrap=c != "agent")  # at 80 columns, only agent may be shortened
    for j, n, p1, counts in rows:  # a job of controls only shows their pass@1 dimmed: not a model score
        shown = "-" if p1 is None else f"{p1:.3f}" if counts == "model arms" else f"[dim]{p1:.3f} ctl[/]"
        table.add_row(j.id, j.kind, status_text(j), j.agent, j.generation or "-", str(n), shown)
    console.print(table)


def _figures(store: Any, job: Any) -> tuple[int, float | None, str | None]:
    """A run job's trials, pass@1 and whose trials it counts (its model arms; a job of controls only: those); a
    phase job's trials over all its child jobs, a cycle's over its phases' (pass@1 would mix arms there: none)."""
    from rsi.report.jobs import summarize

    if job.kind == "run":
        s = summarize(job, store.trials(job.id))
        return s.trials, s.pass_at_1, s.counts
    n, todo = 0, [job.id]
    if job.kind == "cycle":  # its phases are jobs of their own, recorded in its params
        phases = (job.params.get("phases") or {}).values()
        todo += [str(ph[k]) for ph in phases for k in ("job", "holdout_job", "holdout_in_skill_job") if ph.get(k)]
    while todo:
        for child in store.child_jobs(todo.pop()):
            n += len(store.trials(child.id))
            todo.append(child.id)
    return n, None, None


@jobs_app.command("show")
def show_job(
    ctx: typer.Context,
    job: Annotated[str, typer.Argument(help="Job id.")],
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Show a job's summary (the same as at the end of `rsi run`)."""
    from rsi.report.jobs import job_json

    with errors():
        store = open_context(ctx).store
        row = store.get_job(job)
        trials = store.trials(row.id)
    if json_out:
        print_json(job_json(row, trials))
    else:
        render_summary(row, trials)
