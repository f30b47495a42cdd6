"""`rsi expand` (attribution + budgeted harness-config search) and `rsi attribution` (the verdicts)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import Progress
from rich.table import Table

from rsi.cli.common import WorkspaceOpt, console, deprecated, err_console, errors, open_context, print_json
from rsi.cli.progress import TrialBar, progress
from rsi.cli.tracking import ReportToOpt, close_tracking, open_tracking, track_phase
from rsi.core.errors import InputError
from rsi.loop.hooks import ExpandHooks
from rsi.loop.hooks import Progress as RunProgress
from rsi.report.jobs import integrity_text

if TYPE_CHECKING:
    from rsi.loop.expand.phase import ExpandOutcome


def register(app: typer.Typer) -> None:
    app.command("expand")(expand)
    app.command("attribution")(attribution)


class _Hooks(ExpandHooks):
    def __init__(self, progress: Progress, quiet: bool) -> None:
        self.p, self.quiet = progress, quiet

    def message(self, text: str) -> None:
        if not self.quiet:
            err_console.print(text, highlight=False, soft_wrap=True)

    def stage(self, key: str) -> RunProgress:
        return TrialBar(self.p, key)


def expand(
    ctx: typer.Context,
    budget: Annotated[float | None, typer.Option("--budget", help="Limit in --unit (default 60 trials).")] = None,
    unit: Annotated[str, typer.Option("--unit", help="trials | tokens | minutes")] = "trials",
    gen: Annotated[str | None, typer.Option("--gen", help="Generation (default: the current one).")] = None,
    tasks: Annotated[str | None, typer.Option("--tasks", help="Glob over train task names.")] = None,
    strategy: Annotated[str, typer.Option("--strategy", help="adaptive | random | grid")] = "adaptive",
    seed: Annotated[int, typer.Option("--seed")] = 0,
    attempts: Annotated[int, typer.Option("--attempts", "-k", help="Baseline attempts per task.")] = 2,
    proposals: Annotated[int, typer.Option("--proposals", help="Reflective proposals to ask for.")] = 2,
    fewshot: Annotated[int, typer.Option("--fewshot", help="Demonstrations per few-shot candidate, drawn from this "
                                         "generation's passing train trajectories (the baseline's, else the "
                                         "passes the search finds); 0: no few-shot candidates.")] = 2,
    explore: Annotated[int, typer.Option("--explore", help="Attempts the search gives each candidate on each unsolved "
                                         "task at most, one round of looks at a time (the model samples: a second "
                                         "attempt can pass where the first missed; 1 for greedy decoding).")] = 3,
    replays: Annotated[int, typer.Option("--replays", help="Oracle replays per train task: the reference replayed "
                                         "through the production harness as the agent's turns (training data; no "
                                         "model call). 0: none.")] = 1,
    replay_style: Annotated[str, typer.Option(
        "--replay-style", help="How a replay frames the reference: plain (its commands, then the finish word), look "
                               "(a look at the inputs first), careful (a look first, a check of the output last; "
                               "measured to teach the 135M model to look and stop).")] = "plain",
    hints: Annotated[str, typer.Option("--hints", help="The hint ladder for train tasks the baseline failed: the "
                                       "model's own rollouts with 1: the commands the reference uses, 2: its first "
                                       "command, 3: the whole reference; comma-separated, e.g. 1,2,3 (default: "
                                       "none: the config search gets those model trials).")] = "",
    hint_attempts: Annotated[int, typer.Option("--hint-attempts", help="Hinted rollouts per task and level.")] = 1,
    hint_tasks: Annotated[int | None, typer.Option("--hint-tasks", help="At most this many failed tasks climb the "
                                                   "hint ladder (default: all).")] = None,
    baseline_per_template: Annotated[int | None, typer.Option(
        "--baseline-per-template", help="Run the baseline, its attribution and the search on at most this many "
        "train tasks per template (those already run first); replays still cover every task (default: all).")] = None,
    search: Annotated[bool, typer.Option(
        "--search/--no-search", help="Search harness-config candidates with what the baseline, attribution and "
                                     "sources leave (--no-search: none).")] = True,
    concurrency: Annotated[int, typer.Option("--concurrency", "-n")] = 2,
    candidate: Annotated[list[str] | None, typer.Option(
        "--candidate", "-c", help="A config patch to try as well (repeatable): a YAML file or inline YAML of dotted "
        "prompt/sampling/loop paths, e.g. '{sampling.temperature: 0.2, loop.max_turns: 8}'.")] = None,
    resume: Annotated[str | None, typer.Option("--resume", help="Continue an expand job.")] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print the outcome as JSON.")] = False,
    report_to: Annotated[list[str] | None, ReportToOpt] = None,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
    no_fewshot: Annotated[bool, deprecated("--no-fewshot", "--fewshot 0")] = False,
) -> None:
    """Expansion: baseline, attribution, config search under a budget, the adopted config."""
    from rsi.core.errors import InputError
    from rsi.loop.expand.phase import ExpandRequest
    from rsi.loop.expand.phase import expand as run_expand
    from rsi.loop.expand.sources import SourcesPlan

    with errors():
        try:
            levels = tuple(int(x) for x in hints.split(",") if x.strip())
        except ValueError:
            raise InputError("--hints", None, f"'{hints}' is not a comma-separated list of levels 1-3") from None
        sources = SourcesPlan(replays=replays, hints=levels, hint_attempts=hint_attempts, hint_tasks=hint_tasks,
                              replay_style=replay_style)
        wctx = open_context(ctx)
        req = ExpandRequest(budget=budget, unit=unit, generation=gen, tasks=tasks, strategy=strategy, seed=seed,
                            attempts=attempts, proposals=proposals, concurrency=concurrency, resume=resume,
                            candidates=list(candidate or []), fewshot=0 if no_fewshot else fewshot,
                            explore=explore, sources=sources, baseline_per_template=baseline_per_template,
                            search=search)
        tracking = open_tracking(wctx, report_to)
        try:
            with progress(as_json) as p:
                out = run_expand(wctx, req, _Hooks(p, as_json))
            track_phase(tracking, wctx, "expand", out)
        finally:
            close_tracking(tracking, as_json)
        if as_json:
            print_json(out.as_json())
        else:
            render(out)
        if out.interrupted and out.complete:  # the usual end: the search spent what it was given
            err_console.print(f"[dim]the search spent the budget; `rsi expand --resume {out.job_id} --budget M` "
                              "searches further[/]", highlight=False, soft_wrap=True)
        elif out.interrupted:
            err_console.print(f"[yellow]stopped:[/] {out.reason}", highlight=False, soft_wrap=True)
            raise typer.Exit(3)


def _pct(x: float) -> str:
    return f"{100 * x:.1f}%"


def render(out: ExpandOutcome) -> None:
    t = Table(title=f"expand {out.job_id} ({out.generation}, {out.strategy}, {out.tasks} train tasks)")
    t.add_column("figure")
    t.add_column("value")
    b = out.baseline
    t.add_row("baseline", f"{b.passes}/{b.attempts} trials ({_pct(b.rate)}), {b.tasks_solved} task(s) solved")
    c = out.coverage
    t.add_row("coverage (any config)", f"{c['solved']}/{c['tasks']} ({_pct(c['rate'])})")
    s = out.best
    t.add_row("best single config", f"{s.label}: {s.tasks_solved}/{out.tasks} tasks, pass rate {_pct(s.rate)} "
                                    f"[{_pct(s.ci[0])}, {_pct(s.ci[1])}] (Wilson 95%)")
    a = out.adopted
    if a.get("new", True):
        diff = "; ".join(f"{d['path']}: {d['from']!r} -> {d['to']!r}" for d in a["diff"]) or "no change"
        won = next((c for c in out.configs if c.label == a.get("label")), None)
        test = (f"; better on {won.wins} task(s), worse on {won.losses}, one-sided sign test p={won.p_value:.3g}"
                if won is not None else "")
        t.add_row("adopted", f"{a['name']} ({a['digest'][:12]}) at {a['path']}: {diff}{test}")
    else:
        t.add_row("adopted", f"none: no candidate beat the baseline; {a['name']} ({a['digest'][:12]}) stays")
    t.add_row("attribution", ", ".join(f"{k} {v}" for k, v in out.attribution.items()))
    src = out.sources or {}
    if src:
        r = src.get("replays") or {}
        hinted = "; ".join(f"{lv} {h['passed']}/{h['trials']} on {h['tasks']} task(s)"
                           for lv, h in (src.get("hinted") or {}).items()) or "none"
        t.add_row("training-data sources", f"oracle replays {r.get('passed', 0)}/{r.get('trials', 0)} passed on "
                                           f"{r.get('tasks', 0)} task(s); hinted {hinted}")
    spent = out.budget["spent"]
    t.add_row("budget", f"{spent.get('all', 0):g} of {out.budget['limit']:g} {out.budget['unit']} ("
              + ", ".join(f"{k} {v:g}" for k, v in spent.items() if k != "all") + ")")
    t.add_row("trials / wall", f"{out.trials} / {out.wall_sec:.0f} s (this invocation)")
    t.add_row("integrity", integrity_text(out.integrity))
    console.print(t)
    ct = Table(title="configs (per-task Pareto front below)")
    for col in ("config", "solved", "run", "pass rate", "Wilson 95%", "vs baseline (better/worse, p)", "regressions"):
        ct.add_column(col)
    for line in out.configs:
        vs = "-" if line.label == out.baseline.label else f"{line.wins}/{line.losses}, p={line.p_value:.3g}"
        ct.add_row(line.label, str(line.tasks_solved), str(line.tasks_run), _pct(line.rate),
                   f"[{_pct(line.ci[0])}, {_pct(line.ci[1])}]", vs, ", ".join(line.regressions) or "-")
    console.print(ct)
    ft = Table(title="per-task front")
    ft.add_column("task")
    ft.add_column("configs with the best pass rate")
    for task, front in out.front.items():
        ft.add_row(task, ", ".join(front) or "[dim]unsolved[/]")
    console.print(ft)
    for r in out.refused:
        err_console.print(f"refused {r['origin']} candidate {r['label']}: {r['reason']}", highlight=False,
                          soft_wrap=True)


def attribution(
    ctx: typer.Context,
    gen: Annotated[str | None, typer.Option("--gen", help="Generation (default: all).")] = None,
    task: Annotated[str | None, typer.Option("--task", help="Only this task (name).")] = None,
    as_json: Annotated[bool, typer.Option("--json")] = False,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
) -> None:
    """Attribution verdicts (model / task / config / infra) with their evidence."""
    with errors():
        wctx = open_context(ctx)
        if gen is not None:
            wctx.generation(gen)  # an unknown one is an error naming the known ones, not an empty table
        rows = [r for r in wctx.store.attributions(gen) if task is None or r.task_name == task]
        if task is not None and not rows:
            tasks_dir = wctx.ws.tasks_dir
            known = {r.task_name for r in wctx.store.attributions(None)} | (
                {p.name for p in tasks_dir.iterdir() if p.is_dir()} if tasks_dir.is_dir() else set())
            if task not in known:
                raise InputError("--task", None, f"no task '{task}' in {tasks_dir} or in any verdict")
        data: list[dict[str, Any]] = [
            {"task": r.task_name, "task_digest": r.task_digest, "generation": r.generation, "kind": r.kind,
             "confidence": r.confidence, "variant": r.variant, "reason": r.reason, "evidence": r.evidence,
             "created_at": r.created_at, "revised_at": r.revised_at} for r in rows]
        if as_json:
            print_json(data)
            return
        gens = sorted({d["generation"] for d in data})
        t = Table(title=f"attribution ({', '.join(gens) or 'none yet'})")
        t.add_column("task", no_wrap=True)
        if len(gens) > 1:
            t.add_column("gen", no_wrap=True)
        t.add_column("kind", no_wrap=True)
        t.add_column("conf", justify="right", no_wrap=True)
        t.add_column("variant", overflow="fold", max_width=16)
        t.add_column("reason", ratio=1)
        t.add_column("trials", justify="right", no_wrap=True)
        for d in data:
            cells = [d["task"], *([d["generation"]] if len(gens) > 1 else []), d["kind"], f"{d['confidence']:.2f}",
                     d["variant"] or "-", d["reason"], str(len(d["evidence"]))]
            t.add_row(*cells)
        console.print(t)
