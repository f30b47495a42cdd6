"""`rsi promote GEN` / `rsi rollback`: the holdout gates, printed one row each, and what changed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TaskID, TextColumn, TimeElapsedColumn
from rich.table import Table

from rsi.cli.common import WorkspaceOpt, console, err_console, errors, open_context, print_json
from rsi.cli.tracking import ReportToOpt, close_tracking, generation_params_of, open_tracking


def register(app: typer.Typer) -> None:
    app.command("promote")(promote)
    app.command("rollback")(rollback)


def gate_table(verdict: Any, title: str) -> Table:
    t = Table(title=title)
    for c in ("gate", "threshold", "measured", "result", "detail"):
        t.add_column(c)
    for g in verdict.gates:
        t.add_row(g.name, g.threshold, g.measured, "[green]pass[/]" if g.passed else "[red]FAIL[/]", g.detail)
    return t


def promote(
    ctx: typer.Context,
    gen: Annotated[str | None, typer.Argument(help="The candidate generation (made by `rsi update`); with "
                                                    "--resume, the job's own when left out.")] = None,
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Evaluate and print; change no state.")] = False,
    concurrency: Annotated[int, typer.Option("--concurrency", "-n", help="Trials at a time.")] = 2,
    resume: Annotated[str | None, typer.Option("--resume", help="Resume this promote job.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
    html: Annotated[bool, typer.Option("--html/--no-html", help="Write the HTML diff report (gates first).")] = True,
    report_to: Annotated[list[str] | None, ReportToOpt] = None,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Evaluate GEN and its parent on the sealed holdout; promote GEN only if every gate passes."""
    from rsi.loop.promote.phase import PromoteRequest
    from rsi.loop.promote.phase import promote as run_promote
    from rsi.loop.run import Progress as RunProgress

    with errors():
        wctx = open_context(ctx)
        gen = _candidate(wctx, gen, resume)
        tracking = open_tracking(wctx, report_to)
        cols = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
        with Progress(*cols, console=err_console, transient=json_out) as p:
            bar: dict[str, TaskID] = {}

            class Bar(RunProgress):
                def start(self, total: int, done: int, job_id: str) -> None:
                    bar["id"] = p.add_task(f"holdout trials ({job_id})", total=total, completed=done)

                def trial_finished(self, spec: Any, result: Any) -> None:
                    p.advance(bar["id"])

            try:
                out = run_promote(wctx, PromoteRequest(gen, dry_run=dry_run, concurrency=concurrency, resume=resume),
                                  Bar())
            except BaseException:
                close_tracking(tracking, True)
                raise
    if json_out:
        print_json(out.as_json())
    else:
        v = out.verdict
        console.print(gate_table(v, f"promote {out.candidate} over {out.parent} ({out.job_id})"))
        part = "" if v.superiority_part == "unseen" and len(v.parts) <= 1 else \
            f"{v.superiority_part.replace('_', '-')} part (gated for superiority), "
        console.print(f"holdout: {part}{v.n_tasks} task(s) of {out.holdout_tasks}; pass rate {out.parent} "
                      f"{v.parent_rate:.3f} -> {out.candidate} {v.candidate_rate:.3f}; "
                      f"trials reused {out.trials['reused']}, run {out.trials['planned']}, "
                      f"infra {out.trials['infra']}", highlight=False)
        from rsi.core.promotion import figures

        for line in figures(v) if v.n_tasks else []:
            console.print(line, highlight=False)
        if out.skipped:
            console.print(f"[yellow]{out.skipped}[/]", highlight=False)
        if out.interrupted:
            console.print(f"[yellow]interrupted: {out.interrupted}[/]", highlight=False)
        elif dry_run:
            console.print(f"dry run: {'would promote' if v.passed else 'would reject'} {out.candidate}; "
                          "nothing changed", highlight=False)
        for c in out.changes:
            console.print(c, highlight=False)
    report = None
    if html and not dry_run and not out.interrupted and not out.skipped:
        report = _write_report(wctx, out.parent, out.candidate, quiet=json_out)
    if tracking is not None:
        from rsi.track.records import phase as phase_record

        rec = phase_record("promote", {}, out, wctx.ws.root)
        rec.params = {**generation_params_of(wctx, out.candidate), **rec.params}
        rec.artifacts += [p for p in (report, wctx.ws.root / "generations" / f"{out.candidate}.yaml") if p]
        tracking.run(out.job_id, f"promote {out.job_id}", rec, status="KILLED" if out.interrupted else "FINISHED")
        close_tracking(tracking, json_out)
    if out.interrupted:
        raise typer.Exit(130 if "interrupted" in out.interrupted or "Ctrl-C" in out.interrupted else 3)
    if not out.verdict.passed:
        raise typer.Exit(1)


def _write_report(wctx: Any, parent: str, candidate: str, quiet: bool) -> Path | None:
    """The diff report of the decision (`rsi diff PARENT CANDIDATE --format html`); a report that cannot be
    written is a warning, never a different exit code for the promotion."""
    try:
        from rsi.report.diff import build_diff, default_out
        from rsi.report.diff_html import html as render_html
        from rsi.store.files import write_atomic

        path = default_out(wctx, parent, candidate, "html")
        path.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(path, render_html(build_diff(wctx, parent, candidate)))
    except Exception as e:  # noqa: BLE001 - the promotion is recorded; only its page is missing
        err_console.print(f"[yellow]warning:[/] the HTML diff report was not written: {e}", highlight=False)
        return None
    if not quiet:
        console.print(f"HTML diff report: {path.resolve()}", highlight=False, soft_wrap=True)
    return path


def rollback(
    ctx: typer.Context,
    json_out: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Re-promote the generation the current one replaced; the current one becomes rejected."""
    from rsi.loop.promote.phase import rollback as run_rollback

    with errors():
        out = run_rollback(open_context(ctx))
    if json_out:
        print_json({"rolled_back": out.rolled_back, "restored": out.restored, "changes": out.changes})
        return
    console.print(f"rolled back {out.rolled_back}; current generation: {out.restored}", highlight=False)
    for c in out.changes:
        console.print(f"  {c}", highlight=False)


def _candidate(wctx: Any, gen: str | None, resume: str | None) -> str:
    """GEN as given, else (with --resume) the generation the resumed promote job measures; a GEN that is not the
    job's is refused rather than measured under another job's trials."""
    from rsi.core.errors import InputError

    if resume is None:
        if gen is None:
            raise InputError("GEN", None, "name the candidate generation to promote (or --resume JOB)")
        return gen
    from rsi.core.errors import NotFoundError

    try:
        job = wctx.store.get_job(resume)
    except NotFoundError:
        job = None
    if job is None or job.kind != "promote":
        raise InputError("--resume", None, f"no promote job {resume} in {wctx.ws.root}")
    if gen is not None and job.generation and gen != job.generation:
        raise InputError("GEN", None, f"{gen} is not the generation promote job {resume} measures "
                                      f"({job.generation}); leave GEN out to resume it")
    return gen or str(job.generation)
