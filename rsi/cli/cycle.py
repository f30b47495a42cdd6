"""`rsi cycle` (discover -> expand -> update -> promote once) and `rsi demo` (the same on a fresh workspace)."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import Progress, TaskID
from rich.table import Table

from rsi.cli.common import (
    AddressOpt,
    ExecutorOpt,
    TrialsUnitOpt,
    WorkspaceOpt,
    console,
    deprecated,
    err_console,
    errors,
    open_context,
    print_json,
    trials_only,
    use_executor,
)
from rsi.cli.progress import TrialBar, progress
from rsi.cli.tracking import CycleTracking, ReportToOpt
from rsi.loop.hooks import CycleHooks
from rsi.loop.hooks import Progress as RunProgress
from rsi.report.jobs import integrity_text

if TYPE_CHECKING:
    from rsi.loop.cycle.phase import CycleOutcome
    from rsi.loop.cycle.runs import CyclesOutcome


def register(app: typer.Typer) -> None:
    app.command("cycle")(cycle)
    app.command("demo")(demo)


class _Hooks(CycleHooks):
    """A bar per phase stage (discover's oracle/controls/probe, expand's baseline/search rounds, promote's
    holdout) and one for training steps."""

    def __init__(self, p: Progress, quiet: bool, tracking: CycleTracking | None = None) -> None:
        self.p, self.quiet, self.tracking = p, quiet, tracking
        self.train_bar: TaskID | None = None

    def message(self, text: str) -> None:
        if not self.quiet:
            self.p.console.print(text, highlight=False, soft_wrap=True, markup=False)

    def phase(self, name: str) -> None:
        if not self.quiet:
            self.p.console.rule(f"[bold]{name}")

    def stage(self, phase: str, key: str) -> RunProgress:
        return TrialBar(self.p, f"{phase}: {key}")

    def train_step(self, step: int, total: int, loss: float) -> None:
        if self.train_bar is None:
            self.train_bar = self.p.add_task("update: training steps", total=total, passed="-")
        self.p.update(self.train_bar, completed=step, passed=f"loss {loss:.4f}")

    # the trackers (--report-to): a run per cycle, a nested run per phase (rsi.cli.tracking)
    def cycle_started(self, job_id: str, generation: str, split: dict[str, float]) -> None:
        if self.tracking:
            self.tracking.cycle_started(job_id, generation, split)

    def phase_done(self, name: str, info: dict[str, Any], result: Any) -> None:
        if self.tracking:
            self.tracking.phase_done(name, info, result)

    def cycle_done(self, outcome: Any) -> None:
        if self.tracking:
            self.tracking.cycle_done(outcome)


def _fmt(x: Any, pct: bool = False) -> str:
    if x is None:
        return "-"
    if isinstance(x, float):
        return f"{100 * x:.1f}%" if pct else f"{x:.4g}"
    return str(x)


def summary(out: CycleOutcome) -> Table:
    ph = out.phases
    t = Table(title=f"cycle {out.job_id} on {out.generation} ({out.wall_sec:.0f} s)", title_justify="left")
    d, e, u, p = (ph.get(k, {}) for k in ("discover", "expand", "update", "promote"))
    ids = [str(x.get(k)) for x in (d, e, u, p) for k in ("job", "run") if x.get(k)]
    t.add_column("phase")
    t.add_column("job", no_wrap=True, min_width=max(map(len, ids), default=3))  # whole: `jobs show` takes it
    for c in ("status", "budget", "result"):
        t.add_column(c)
    t.add_row("discover", _fmt(d.get("job")), _fmt(d.get("status")), f"{out.split['discover']:g}",
              f"{d.get('admitted', 0)} admitted of {d.get('candidates', 0)} ({d.get('holdout', 0)} holdout)"
              if d else "-")
    t.add_row("expand", _fmt(e.get("job")), _fmt(e.get("status")), f"{out.split['expand']:g}",
              (f"baseline {_fmt(e.get('baseline_rate'), True)}, {e.get('trials', 0)} trials"
               + (f" ({integrity_text(e['integrity'])})" if e.get("integrity") else "") + "; adopted "
               + (str(e.get("adopted")) if e.get("adopted_new") else "none (baseline stays)")) if e else "-")
    t.add_row("update", _fmt(u.get("run")), _fmt(u.get("status")), "0",
              (f"{u.get('candidate')}: {u.get('accepted')} accepted trajectories"
               + (" (" + ", ".join(f"{k} {v}" for k, v in u["samples"].items()) + f"; {u.get('templates')} "
                  "templates)" if u.get("samples") else "") + f", {u.get('steps')} steps"
               if u.get("candidate") else _fmt(u.get("reason"))) if u else "-")
    t.add_row("promote", _fmt(p.get("job")), _fmt(p.get("status")), f"{out.split['promote']:g}",
              ("".join(f"{PART_NAMES.get(x['part'], x['part'])} {_fmt(x['parent_rate'], True)} -> "
                       f"{_fmt(x['candidate_rate'], True)} on {x['units']} template(s), p {_fmt(x['p_value'])}"
                       + (f" (non-inferiority: p {_fmt(x['ni_p_value'])}, lower bound {_fmt(x.get('ni_lower'))})"
                          if x.get("ni_p_value") is not None else "") + "; " for x in p.get("parts") or [])
               + (f"{p.get('rounds')} round(s), bound {_fmt(p.get('bound'))}; " if p.get("parts") else "")
               + f"holdout {_fmt(p.get('parent_rate'), True)} -> {_fmt(p.get('candidate_rate'), True)} "
               + (f"on {p.get('holdout_units')} {p.get('unit')}(s) ({p.get('holdout_tasks')} tasks), "
                  f"p {_fmt(p.get('p_value'))} (per task {_fmt(p.get('task_p_value'))}): "
                  if p.get("unit") not in (None, "task") else
                  f"on {p.get('holdout_tasks')} task(s), p {_fmt(p.get('p_value'))}: ")
               + (f"suite {_fmt(p.get('suite_parent_rate'), True)} -> {_fmt(p.get('suite_candidate_rate'), True)} "
                  f"(non-inferiority p {_fmt(p.get('suite_p_value'))}): " if p.get("suite_tasks") else "")
               + (f"in-template {_fmt(p.get('in_template_parent_rate'), True)} -> "
                  f"{_fmt(p.get('in_template_candidate_rate'), True)} (p {_fmt(p.get('in_template_p_value'))}, "
                  "not gated): " if p.get("in_template_tasks") else "")
               + ("[green]promoted[/]" if p.get("passed") else
                  f"[red]rejected[/] ({', '.join(p.get('failing') or [])})")
               + (f"; {p['skipped']}" if p.get("skipped") else "")) if p else "-")
    return t


PART_NAMES = {"in_skill": "in-skill", "unseen": "unseen-template", "no_forgetting": "no-forgetting"}


def samples_text(samples: dict[str, int]) -> str:
    """`self 3, hinted 2, oracle 20 (5 of 25 the model's own)`: update's samples by source, the model's own share."""
    from rsi.core.training import OWN_SOURCES  # samples whose actions the model itself chose (DESIGN §12)

    if not samples:
        return "-"
    own, total = sum(v for k, v in samples.items() if k in OWN_SOURCES), sum(samples.values())
    return ", ".join(f"{k} {v}" for k, v in samples.items()) + f" ({own} of {total} the model's own)"


def _run(wctx: Any, req: Any, json_out: bool, cycles: int = 1, tracking: CycleTracking | None = None) -> CyclesOutcome:
    from rsi.loop.cycle.runs import run_cycles

    if cycles < 1:
        from rsi.core.errors import InputError

        raise InputError("--cycles", None, f"must be at least 1 (got {cycles})")
    with progress(json_out) as bars:
        return run_cycles(wctx, req, cycles, _Hooks(bars, json_out, tracking))


def generations_table(res: CyclesOutcome) -> Table:
    """Per cycle: samples by source (the model's own among them), every holdout part parent -> candidate with its
    p-values (in-skill, unseen-template, no-forgetting), the gated holdout, the suite, in-template, the decision."""
    def pair(x: tuple[float | None, float | None]) -> str:
        return f"{_fmt(x[0], True)} -> {_fmt(x[1], True)}"

    def part(r: Any, name: str) -> str:
        x = r.parts.get(name)
        if not x:
            return "-"
        ni = f", non-inferiority p {_fmt(x['ni_p_value'])}" if x.get("ni_p_value") is not None else ""
        return f"{pair((x['parent_rate'], x['candidate_rate']))}, p {_fmt(x['p_value'])}{ni} ({x['units']})"

    t = Table(title="generations (each cycle: parent -> candidate)", title_justify="left")
    for c in ("cycle", "parent -> candidate", "samples by source", "in-skill holdout (this cycle's question)",
              "unseen-template holdout", "no-forgetting holdout (earlier cycles')", "gated holdout",
              "suite (no generator)", "in-template (train split)", "promote trials reused", "verdict"):
        t.add_column(c, no_wrap=c in ("cycle", "parent -> candidate"))
    for i, r in enumerate(res.rows, 1):
        t.add_row(str(i), f"{r.parent} -> {r.candidate or '-'}", samples_text(r.samples),
                  part(r, "in_skill"), part(r, "unseen"), part(r, "no_forgetting"),
                  f"{pair(r.holdout)}, p {_fmt(r.holdout_p)} ({r.holdout_units} units, {r.rounds} round(s))",
                  f"{pair(r.suite)}, non-inferiority p {_fmt(r.suite_p)}",
                  f"{pair(r.in_template_pair)}, p {_fmt(r.in_template_p)}" if r.in_template_pair[0] is not None
                  else f"{_fmt(r.in_template, True)} (parent, expand baseline)", str(r.reused),
                  r.verdict or (r.stopped or "-"))
    return t


def _report_all(wctx: Any, res: CyclesOutcome, json_out: bool, html: bool) -> CycleOutcome:
    """Each cycle's report (the last one's in full), then the per-generation table; returns the last cycle."""
    if json_out and len(res.outcomes) > 1:
        print_json(res.as_json())
        return res.outcomes[-1]
    for out in res.outcomes[:-1]:
        console.print(summary(out))
    _report(wctx, res.outcomes[-1], json_out, html)
    page = None
    if html:
        from rsi.report.cycles_html import html as cycles_html
        from rsi.store.files import write_atomic

        page = wctx.ws.state_dir / "reports" / f"cycles-{res.outcomes[0].job_id}.html"
        page.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(page, cycles_html(res.as_json()))
    if not json_out:
        console.print(generations_table(res))
        if res.ended:
            console.print(f"[yellow]{res.ended}[/]", highlight=False, soft_wrap=True)
        if page is not None:
            console.print(f"HTML per-generation report: {page.resolve()}", highlight=False, soft_wrap=True)
    return res.outcomes[-1]


def _report(wctx: Any, out: CycleOutcome, json_out: bool, html: bool) -> Path | None:
    """The summary, the gate table and the diff against the parent (HTML written when asked)."""
    from rsi.cli.promote import gate_table
    from rsi.report.diff import build_diff, default_out
    from rsi.report.diff_render import term

    path = None
    if out.candidate:
        parent = wctx.generation(out.candidate).parent
        report = build_diff(wctx, parent, out.candidate)
        if html:
            from rsi.report.diff_html import html as render_html
            from rsi.store.files import write_atomic

            path = default_out(wctx, report.a, report.b, "html")
            path.parent.mkdir(parents=True, exist_ok=True)
            write_atomic(path, render_html(report))
    if json_out:
        print_json({**out.as_json(), "report": str(path) if path else None})
        return path
    console.print(summary(out))
    prom = out.results.get("promote")
    if prom is not None:
        console.print(gate_table(prom.verdict, f"gates: {prom.candidate} over {prom.parent}"))
    if out.stopped:
        console.print(f"[yellow]stopped:[/] {out.stopped}", highlight=False, soft_wrap=True)
    if out.candidate:
        console.print(term(build_diff(wctx, wctx.generation(out.candidate).parent, out.candidate)))
    if path is not None:
        console.print(f"HTML diff report: {path.resolve()}", highlight=False, soft_wrap=True)
    console.print(f"to look around (generations, gates, trials, step by step): rsi -w {wctx.ws.root} view",
                  highlight=False, soft_wrap=True)
    return path


def _exit(out: CycleOutcome, root: Path, json_out: bool, again: str | None = None) -> None:
    """0 when the cycle finished (a candidate promoted or rejected, or no candidate to make); 130 after
    Ctrl-C, 3 when a phase stopped early; both print how to resume (`again`: the command that does)."""
    ph = out.phases
    if out.stopped and ph.get("update", {}).get("status") != "no_candidate":
        if not json_out:
            err_console.print(f"resume with `{again or f'rsi -w {root} cycle --resume {out.job_id}'}`",
                              highlight=False, soft_wrap=True)
        raise typer.Exit(130 if "interrupted" in out.stopped else 3)


def cycle(
    ctx: typer.Context,
    unit: Annotated[str, TrialsUnitOpt] = "trials",
    budget: Annotated[float, typer.Option("--budget", help="Trials for the whole cycle, split across the "
                                          "phases (printed before it starts).")] = 200,
    resume: Annotated[str | None, typer.Option("--resume", help="Finish cycle job JOB: finished phases are "
                                               "skipped, the unfinished one resumes.")] = None,
    candidates: Annotated[int, typer.Option("--candidates", help="Discover: candidates to generate.")] = 6,
    generator: Annotated[list[str] | None, typer.Option(
        "--generator", "-g", help="Discover: generator by name; repeat (default: every procedural family).")] = None,
    level: Annotated[list[int] | None, typer.Option(
        "--level", help="Discover: levels to take in turn; repeat (default: each family's curriculum level).")] = None,
    attempts: Annotated[int | None, typer.Option(
        "--attempts", "-k", help="Discover: probe attempts per candidate (default: the contract's).")] = None,
    compositions: Annotated[int, typer.Option(
        "--compositions", help="Discover: train compositions (level 3: two trained operations in a combination "
                               "the split trains on) to generate after the other candidates.")] = 0,
    expand_attempts: Annotated[int, typer.Option("--expand-attempts", help="Expand: baseline attempts per task.")] = 1,
    proposals: Annotated[int, typer.Option("--proposals", help="Expand: reflective proposals to ask for.")] = 1,
    backend: Annotated[str, typer.Option("--backend", help="Update: export | command | local")] = "local",
    command: Annotated[str | None, typer.Option("--command", help="Update: the command backend's template.")] = None,
    steps: Annotated[int | None, typer.Option("--steps", help="Update: optimiser steps.")] = None,
    concurrency: Annotated[int, typer.Option("-n", "--concurrency", help="Trials at a time.")] = 2,
    seed: Annotated[int | None, typer.Option(
        "--seed", help="Discover's base seed (default: above every earlier discover or cycle seed in this "
                       "workspace, so each cycle draws new candidates).")] = None,
    cycles: Annotated[int, typer.Option("--cycles", help="Cycles to run, each on the generation the one before "
                                        "promoted (a cycle that promotes nothing ends the run); the budget is "
                                        "per cycle.")] = 1,
    html: Annotated[bool, typer.Option("--html/--no-html", help="Write the HTML diff report.")] = True,
    json_out: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
    report_to: Annotated[list[str] | None, ReportToOpt] = None,
    executor: Annotated[str | None, ExecutorOpt] = None,
    address: Annotated[str | None, AddressOpt] = None,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
    old_n: Annotated[int | None, deprecated("--n", "--candidates")] = None,
) -> None:
    """Run discover -> expand -> update -> promote for the current generation, under one budget per cycle."""
    from rsi.loop.cycle.phase import CycleRequest

    with errors():
        trials_only(unit)
        if compositions < 0:
            from rsi.core.errors import InputError

            raise InputError("--compositions", None, f"must be 0 or more, not {compositions}")
        wctx = open_context(ctx)
        use_executor(wctx, executor, address)
        req = CycleRequest(budget=budget, resume=resume, n=candidates if old_n is None else old_n,
                           generators=list(generator or []), levels=list(level or []), attempts=attempts,
                           compositions=compositions, expand_attempts=expand_attempts, proposals=proposals,
                           backend=backend, command=command, steps=steps, concurrency=concurrency, seed=seed)
        tracked = CycleTracking.open(wctx, report_to)
        try:
            out = _report_all(wctx, _run(wctx, req, json_out, cycles, tracked), json_out, html)
            CycleTracking.attach_report(tracked, wctx, out)
        finally:
            CycleTracking.close(tracked, json_out)
    _exit(out, wctx.ws.root, json_out)


def _clear(directory: Path, created: bool) -> None:
    """Undo the demo's `init` (the directory was absent or empty before)."""
    if created:
        shutil.rmtree(directory)
        return
    for c in list(directory.iterdir()):
        shutil.rmtree(c) if c.is_dir() else c.unlink()


def demo(
    ctx: typer.Context,
    directory: Annotated[Path | None, typer.Option(
        "--dir", help="The fresh workspace to create (the same as -w; default: rsi-demo).", show_default=False)
    ] = None,
    unit: Annotated[str, TrialsUnitOpt] = "trials",
    budget: Annotated[float, typer.Option("--budget", help="Trials per cycle, all phases (most are cheap "
                                          "controls and replays, no model call).")] = 2750,
    cycles: Annotated[int, typer.Option("--cycles", help="Cycles to run, each on the generation the one before "
                                        "promoted.")] = 1,
    resume: Annotated[str | None, typer.Option(
        "--resume", help="Finish demo cycle JOB in its workspace (--dir or -w): finished phases are skipped, the "
                         "unfinished one resumes, the rest run with the demo's settings.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
    report_to: Annotated[list[str] | None, ReportToOpt] = None,
    mol: Annotated[bool, typer.Option("--mol", help="Mixture-of-LoRA: the candidate holds four adapters (L0 chat + "
                                      "router, three specialists by family), gated on routing accuracy too.")] = False,
    seed: Annotated[int | None, typer.Option(
        "--seed", help="The first cycle's seed: its tasks and its sealed holdout (default: a fresh one each demo, "
                       "printed and recorded; give it to ask the same questions again).")] = None,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """One cycle on a fresh workspace with the embedded model, sized for a 2-core machine; writes the HTML report."""
    import dataclasses

    from rsi.cli.common import workspace_root
    from rsi.core.errors import InputError
    from rsi.loop.context import WorkspaceContext
    from rsi.loop.cycle.demo import demo_request, demo_settings, fresh_seed
    from rsi.loop.cycle.phase import plan_split
    from rsi.loop.init import init_workspace

    t0 = time.monotonic()
    with errors():
        trials_only(unit)
        CycleTracking.check(report_to)
        other = workspace_root(ctx)
        if directory is not None and other is not None and directory.resolve() != other.resolve():
            raise InputError("--dir", None, f"{directory} and -w {other} name two workspaces; give one")
        directory = directory or other or Path("rsi-demo")
        if resume:
            if not (directory / "rsi.yaml").is_file():
                raise InputError("--resume", None, f"{directory} is not a workspace (no rsi.yaml); name the demo's "
                                                   "with --dir")
            wctx = WorkspaceContext.open(directory)
            req = dataclasses.replace(demo_request(budget), resume=resume)
        else:
            if directory.exists() and any(directory.iterdir()):
                raise InputError(str(directory), None, "exists and is not empty; the demo makes a fresh workspace "
                                                       "(choose another --dir, or finish a stopped demo with "
                                                       "--resume JOB)")
            created = not directory.exists()
            init_workspace(directory, starter_tasks=False)  # discover makes the demo's tasks, at the frontier
            demo_settings(directory)
            if mol:
                from rsi.loop.cycle.demo import demo_mol_settings

                demo_mol_settings(directory)
            wctx = WorkspaceContext.open(directory)
            # a fresh seed per demo: no two demos ask the same held-out question (recorded in the cycle job and
            # printed; --seed asks it again)
            req = dataclasses.replace(demo_request(budget), seed=seed if seed is not None else fresh_seed())
            try:
                plan_split(wctx, budget, req.discover_share, req.holdout_target)  # refused before anything is left
            except InputError:
                wctx.store.close()
                _clear(directory, created)
                raise
        if not json_out:
            err_console.print(f"demo workspace: {directory.resolve()}", highlight=False)
        tracked = CycleTracking.open(wctx, report_to)
        try:
            out = _report_all(wctx, _run(wctx, req, json_out, cycles, tracked), json_out, html=True)
            CycleTracking.attach_report(tracked, wctx, out)
        finally:
            CycleTracking.close(tracked, json_out)
    if not json_out and not out.stopped:
        console.print(f"demo wall time: {time.monotonic() - t0:.0f} s; continue with "
                      f"`rsi -w {directory} cycle`", highlight=False)
    _exit(out, directory, json_out, f"rsi demo --dir {directory} --resume {out.job_id}")
