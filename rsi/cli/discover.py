"""`rsi discover`: new verifiable tasks at the current generation's frontier (and `--reprobe`)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.progress import Progress, TaskID
from rich.table import Table

from rsi.cli.common import (
    TrialsUnitOpt,
    WorkspaceOpt,
    console,
    deprecated,
    err_console,
    errors,
    open_context,
    print_json,
    trials_only,
)
from rsi.cli.progress import TrialBar, progress
from rsi.cli.tracking import ReportToOpt, close_tracking, open_tracking, track_phase
from rsi.core.errors import InputError
from rsi.loop.hooks import DiscoverHooks
from rsi.loop.hooks import Progress as RunProgress

if TYPE_CHECKING:
    from rsi.store.tables import CandidateRow


def register(app: typer.Typer) -> None:
    app.command("discover")(discover)


class _Hooks(DiscoverHooks):
    """Rich progress: one bar for generation, one per gate/probe stage."""

    def __init__(self, progress: Progress, quiet: bool) -> None:
        self.p, self.quiet = progress, quiet
        self.gen_bar: TaskID | None = None

    def message(self, text: str) -> None:
        if not self.quiet:
            err_console.print(text, highlight=False, soft_wrap=True)

    def generated(self, row: CandidateRow, done: int, total: int) -> None:
        if self.gen_bar is None:
            self.gen_bar = self.p.add_task("generate", total=total, passed=0)
        self.p.update(self.gen_bar, completed=done)

    def stage(self, name: str) -> RunProgress:
        return TrialBar(self.p, name)


def _band(text: str | None) -> tuple[float, float] | None:
    if text is None:
        return None
    try:
        lo, hi = (float(x) for x in text.split(","))
    except ValueError:
        raise InputError("--band", None, f"'{text}' is not LO,HI (two numbers, e.g. 0,0.75)") from None
    return lo, hi


def discover(
    ctx: typer.Context,
    candidates: Annotated[int, typer.Option(
        "--candidates", help="Candidates to generate (with --holdout-only: holdout ones).")] = 10,
    generator: Annotated[list[str] | None, typer.Option(
        "--generator", "-g",
        help="Generator by name; repeat for several (default: files, text, data, logs, pyfix, pipeline; "
             "also: mutate, model).")] = None,
    family: Annotated[list[str] | None, typer.Option("--family", help="Only these families; repeat.")] = None,
    gen: Annotated[str | None, typer.Option("--gen", help="Generation to probe (default: the current one).")] = None,
    band: Annotated[str | None, typer.Option(
        "--band", help="Admit when LO <= probe pass rate <= HI (default: the contract's, e.g. 0,0.75). "
                       "Candidates above HI are dropped, not kept; --reprobe retires pool tasks that became easy.")
    ] = None,
    attempts: Annotated[int | None, typer.Option(
        "--attempts", "-k", help="Probe attempts per valid candidate (default: the contract's).")] = None,
    probe_per_template: Annotated[int | None, typer.Option(
        "--probe-per-template", help="Probe at most this many valid train candidates of one template; the others "
                                     "of it take their probed siblings' pooled rate for the band (default: probe "
                                     "every candidate).")] = None,
    train_templates: Annotated[bool, typer.Option(
        "--train-templates", help="Aim the candidates at the train templates in turn (spread evenly, train "
                                  "phrasings) instead of drawing templates at random.")] = False,
    difficulty: Annotated[int | None, typer.Option(
        "--difficulty", help="Difficulty level for procedural generators (default: each family's curriculum level).")
    ] = None,
    level: Annotated[list[int] | None, typer.Option(
        "--level", help="Levels to take in turn; repeat (e.g. --level 1 --level 2; instead of --difficulty).")
    ] = None,
    seed: Annotated[int | None, typer.Option(
        "--seed", help="Base seed: the same seed gives the same candidates (default: above every earlier "
        "discover or cycle seed here, so a second run draws new ones).")] = None,
    budget: Annotated[float | None, typer.Option(
        "--budget", help="At most this many trials, gate and probe together; stops cleanly when spent.")] = None,
    unit: Annotated[str, TrialsUnitOpt] = "trials",
    concurrency: Annotated[int, typer.Option("-n", "--concurrency", help="Trials at a time.")] = 2,
    holdout_only: Annotated[bool, typer.Option(
        "--holdout-only", help="Top up the sealed holdout split: candidates of holdout templates (those the holdout "
                               "lacks first), admitted on validity alone; --candidates counts them.")
    ] = False,
    part: Annotated[str, typer.Option(
        "--part", help="With --holdout-only, the holdout part to top up: unseen (templates never trained on, any "
                       "phrasing) or in_skill (train templates in their held-out phrasings only).")
    ] = "unseen",
    reprobe: Annotated[bool, typer.Option(
        "--reprobe", help="Re-run the active pool against the generation; retire easy (p = 1) and broken tasks, "
                          "and move each family's difficulty level.")] = False,
    resume: Annotated[str | None, typer.Option("--resume", help="Finish discover job JOB.")] = None,
    json_out: Annotated[bool, typer.Option("--json", help="Print one JSON object instead of tables.")] = False,
    report_to: Annotated[list[str] | None, ReportToOpt] = None,
    _workspace: Annotated[Path | None, WorkspaceOpt] = None,
    old_n: Annotated[int | None, deprecated("--n", "--candidates")] = None,
) -> None:
    """Generate candidate tasks, admit only valid ones at the generation's frontier, and split them.

    Every candidate passes a gate in Docker, cheapest first: it loads and fits the contract; it is not
    a near-duplicate of a pool task; its environment builds; the oracle passes every run; doing nothing
    fails; every known-wrong solution fails. The split is decided by the contract's holdout unit (by
    default the template: no template has tasks on both sides). A valid holdout candidate enters tasks/
    (sealed) on validity alone; the generation attempts each valid train one K times, and it enters
    tasks/ when its pass rate lies in the band. Every decision, with its trial ids, is in the database
    (`rsi tasks list --state ...`).
    """
    from rsi.loop.discover.phase import DiscoverRequest
    from rsi.loop.discover.phase import discover as run_discover
    from rsi.loop.discover.reprobe import reprobe as run_reprobe

    with errors():
        trials_only(unit)
        if part not in ("unseen", "in_skill"):
            raise InputError("--part", None, f"'{part}' is not one of: unseen, in_skill")
        wctx = open_context(ctx)
        bnd = _band(band)
        tracking = None if reprobe else open_tracking(wctx, report_to)
        try:
            with progress(json_out) as bars:
                hooks = _Hooks(bars, json_out)
                if reprobe:
                    rep = run_reprobe(wctx, generation=gen, attempts=attempts, band=bnd, budget=budget,
                                      concurrency=concurrency, stage_progress=hooks.stage)
                else:
                    req = DiscoverRequest(n=candidates if old_n is None else old_n, generators=list(generator or []),
                                          families=list(family or []), generation=gen, band=bnd, attempts=attempts,
                                          budget=budget, resume=resume,
                                          holdout_only=holdout_only, part=part,  # type: ignore[arg-type]
                                          difficulty=difficulty, levels=list(level or []),
                                          seed=seed, concurrency=concurrency, probe_per_template=probe_per_template,
                                          train_templates=train_templates)
                    out = run_discover(wctx, req, hooks)
                    if tracking is not None:
                        track_phase(tracking, wctx, "discover", _Tracked(out), gen or wctx.generation(None).id)
        finally:
            close_tracking(tracking, json_out)
    if reprobe:
        _render_reprobe(rep, json_out)
        return
    _render(out, json_out)
    if out.interrupted:
        err_console.print(f"[bold]stopped:[/] {out.reason}", highlight=False, soft_wrap=True)
        raise typer.Exit(_exit_code(out.reason or ""))


def _exit_code(reason: str) -> int:
    """As `rsi run`: 0 when the budget was spent, 130 on Ctrl-C, 3 on repeated infra failures."""
    if "budget spent" in reason:
        return 0
    return 130 if "interrupted" in reason else 3


def _json(out) -> dict[str, Any]:  # type: ignore[no-untyped-def]
    return {
        "job": out.job_id, "interrupted": out.interrupted, "reason": out.reason, "wall_sec": out.wall_sec,
        "plan": out.plan,
        "candidates": [{"name": c.name, "generator": c.generator, "family": c.family, "template": _template(c),
                        "difficulty": c.difficulty,
                        "seed": c.seed, "state": c.state, "reason": c.reason, "detail": c.detail,
                        "split": c.split, "probe_pass_rate": c.probe_pass_rate, "probe_trials": c.probe_trials,
                        "task_digest": c.task_digest, "evidence": c.evidence} for c in out.candidates],
    }


class _Tracked:
    """The discover outcome as the trackers read a phase's (its JSON, the job id, whether it stopped early)."""

    def __init__(self, out) -> None:  # type: ignore[no-untyped-def]
        self.job_id, self.interrupted, self._json = out.job_id, out.interrupted, _json(out)

    def as_json(self) -> dict[str, Any]:
        return self._json


def _render(out, json_out: bool) -> None:  # type: ignore[no-untyped-def]
    cands: list[CandidateRow] = out.candidates
    if json_out:
        print_json(_json(out))
        return
    admitted = [c for c in cands if c.state == "admitted"]
    console.print(f"[bold]{out.job_id}[/]  generated {len(cands)}, admitted {len(admitted)}, "
                  f"wall time {out.wall_sec:.0f}s", highlight=False)
    rejected = Counter(c.reason for c in cands if c.state in ("rejected", "dropped"))
    if rejected:
        t = Table(title="rejected / dropped by reason", title_justify="left")
        t.add_column("reason")
        t.add_column("n", justify="right")
        for reason, k in rejected.most_common():
            t.add_row(reason or "?", str(k))
        console.print(t)
    t = Table(title="admitted by family and difficulty (holdout: on validity alone, never probed)",
              title_justify="left")
    for col in ("family", "level", "admitted", "train", "holdout", "templates", "p = 0", "0 < p",
                "probe rate (trials)"):
        t.add_column(col)
    groups: dict[tuple[str, int], list[CandidateRow]] = {}
    for c in cands:
        if c.probe_pass_rate is not None or c.state == "admitted":
            groups.setdefault((c.family, c.difficulty), []).append(c)
    for (fam, d), cs in sorted(groups.items()):
        adm = [c for c in cs if c.state == "admitted"]
        probed = [c for c in cs if c.probe_pass_rate is not None]
        rate = f"{sum(c.probe_pass_rate or 0 for c in probed) / len(probed):.2f}" if probed else "-"
        t.add_row(fam, str(d), str(len(adm)), str(sum(c.split == "train" for c in adm)),
                  str(sum(c.split == "holdout" for c in adm)), str(len({_template(c) for c in adm})),
                  str(sum(c.probe_pass_rate == 0 for c in adm)), str(sum((c.probe_pass_rate or 0) > 0 for c in adm)),
                  f"{rate} ({sum(c.probe_trials for c in cs)})")
    console.print(t)


def _template(c: CandidateRow) -> str | None:
    """The candidate's template id, read from its staged task.toml (None when it has none or no stage)."""
    import tomllib

    try:
        raw = tomllib.loads(Path(c.stage_dir, "task", "task.toml").read_text())
    except (OSError, tomllib.TOMLDecodeError):
        return None
    return raw.get("metadata", {}).get("rsi", {}).get("template")


def _render_reprobe(rep, json_out: bool) -> None:  # type: ignore[no-untyped-def]
    if json_out:
        print_json({"job": rep.job_id, "rates": rep.rates, "retired": rep.retired,
                    "levels": [{"family": f, "from": a, "to": b, "why": w} for f, a, b, w in rep.levels],
                    "interrupted": rep.interrupted, "reason": rep.reason})
        return
    console.print(f"[bold]{rep.job_id}[/]  probed {len(rep.rates)} train task(s), retired {len(rep.retired)}",
                  highlight=False)
    for name, why in rep.retired:
        console.print(f"retired {name}: {why}", highlight=False)
    for fam, a, b, why in rep.levels:
        console.print(f"family {fam}: level {a} -> {b} ({why})", highlight=False)
    if rep.interrupted:
        err_console.print(f"[bold]stopped:[/] {rep.reason}", highlight=False)
        raise typer.Exit(1)
