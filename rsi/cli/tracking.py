"""`--report-to`: the commands' side of the trackers (rsi.track). The cycle's hooks open one run per cycle and a
nested run per phase as the phases end; `rsi discover|expand|update|promote` on their own, and `rsi run`, report
one run each. What is
sent comes from the outcomes the loop already returns; a tracker's failure is one warning, never an exit."""

from __future__ import annotations

import contextlib
from pathlib import Path
from typing import Any

import typer

from rsi.cli.common import err_console

ReportToOpt = typer.Option(
    "--report-to", help="Send params, per-step metrics and artifacts to trackers: mlflow, tensorboard, wandb "
    "(comma-separated or repeated; `none`: off). Default: rsi.yaml `tracking.report_to`.")

STATUS = {"stopped": "KILLED", "running": "KILLED"}


def _warn(text: str) -> None:
    err_console.print(f"[yellow]warning:[/] {text}", highlight=False, soft_wrap=True)


def open_tracking(wctx: Any, report_to: list[str] | None) -> Any:
    """The session for `--report-to` (else the workspace's `tracking.report_to`), or None when none is named.
    An unknown name or a missing extra is refused here, before anything runs."""
    from rsi.track.registry import parse_names
    from rsi.track.session import open_session

    settings = wctx.settings.tracking
    names = parse_names(report_to) if report_to else parse_names(settings.report_to)
    source = "--report-to" if report_to else f"{wctx.ws.settings_path}: tracking.report_to"
    return open_session(names, settings, wctx.ws.root, warn=_warn, source=source)


def close_tracking(session: Any, quiet: bool = False) -> None:
    if session is None:
        return
    session.close()
    if not quiet:
        ok = [n for n in session.names if n not in session.failures()]
        if ok:
            err_console.print(f"tracked in: {', '.join(ok)}", highlight=False, soft_wrap=True)


class CycleTracking:
    """What the cycle hooks call: a run per cycle (params at its start, the decision at its end, the report as an
    artifact afterwards) and a nested run per phase as it ends. A cycle's run stays open until the next cycle
    starts or the session closes, so the HTML report written after the loop joins it."""

    def __init__(self, session: Any, wctx: Any) -> None:
        self.session, self.wctx = session, wctx
        self.cycle: str | None = None

    def cycle_started(self, job_id: str, generation: str, split: dict[str, float]) -> None:
        from rsi.track.records import cycle_start

        if self.cycle is not None:
            self.session.end(self.cycle)
        self.cycle = job_id
        rec = cycle_start(job_id, self.wctx.generation(generation), split)
        self.session.start(job_id, f"cycle {job_id}", None, rec.tags)
        self.session.record(job_id, rec)

    def phase_done(self, name: str, info: dict[str, Any], result: Any) -> None:
        from rsi.track.records import phase

        if self.cycle is None:
            return
        rec = phase(name, info, result, self.wctx.ws.root)
        self.session.run(f"{self.cycle}/{name}", name, rec, parent=self.cycle,
                         status=STATUS.get(str(info.get("status")), "FINISHED"))

    def cycle_done(self, outcome: Any) -> None:
        from rsi.track.records import cycle_end

        if self.cycle is None:
            return
        rec = cycle_end(outcome)
        if outcome.candidate:
            rec.artifacts.append(self.wctx.ws.root / "generations" / f"{outcome.candidate}.yaml")
        self.session.record(self.cycle, rec)

    def artifact(self, path: Path | None) -> None:
        if self.cycle is not None and path is not None:
            self.session.artifact(self.cycle, path)

    # what `rsi cycle` / `rsi demo` call around the loop
    @staticmethod
    def check(report_to: list[str] | None) -> None:
        """Refuse an unknown tracker or a missing extra before anything is made (the demo's workspace)."""
        from rsi.track.registry import check, parse_names

        check(parse_names(report_to))

    @classmethod
    def open(cls, wctx: Any, report_to: list[str] | None) -> CycleTracking | None:
        session = open_tracking(wctx, report_to)
        return cls(session, wctx) if session is not None else None

    @staticmethod
    def attach_report(tracked: CycleTracking | None, wctx: Any, out: Any) -> None:
        """The HTML diff report of the last cycle (parent -> candidate), when it was written, on its run."""
        if tracked is None or not out.candidate:
            return
        from rsi.report.diff import default_out

        with contextlib.suppress(Exception):
            path = default_out(wctx, wctx.generation(out.candidate).parent, out.candidate, "html")
            if path.is_file():
                tracked.artifact(path)

    @staticmethod
    def close(tracked: CycleTracking | None, quiet: bool) -> None:
        if tracked is not None:
            close_tracking(tracked.session, quiet)


def generation_params_of(wctx: Any, gen: str) -> dict[str, Any]:
    """The generation's identity as params; empty when it cannot be read (params are a courtesy to the tracker)."""
    from rsi.track.records import generation_params

    try:
        return dict(generation_params(wctx.generation(gen)))
    except Exception:  # noqa: BLE001
        return {}


def track_phase(session: Any, wctx: Any, name: str, outcome: Any, generation: str | None = None) -> None:
    """`rsi expand|update|promote` on its own: one run holding the phase's record and the generation's params."""
    if session is None or outcome is None:
        return
    from rsi.track.records import phase

    rec = phase(name, {}, outcome, wctx.ws.root)
    gen = generation or getattr(outcome, "generation", None) or getattr(outcome, "parent", None)
    if gen:
        rec.params = {**generation_params_of(wctx, str(gen)), **rec.params}
    job = getattr(outcome, "job_id", None) or getattr(outcome, "run_id", None) or name
    status = "KILLED" if getattr(outcome, "interrupted", None) else "FINISHED"
    session.run(str(job), f"{name} {job}", rec, status=status)


def track_run(session: Any, wctx: Any, job: Any, trials: list[Any], interrupted: bool = False) -> None:
    """`rsi run`: one run with the job's settings as params and, per arm and for the job, pass@1, pass@k, trials
    and infra errors (arm i's figures under `arm<i>/`, its label in param `arm<i>`)."""
    if session is None:
        return
    from rsi.report.jobs import summarize
    from rsi.track.base import RunRecord

    s = summarize(job, trials)
    rec = RunRecord(params={"run_job": job.id, "agent": job.agent, "attempts": s.k, "arms": len(s.arms),
                            "generation": job.generation or "none"},
                    tags={"rsi.kind": "run", "counts": s.counts})
    rec.metric("pass_at_1", s.pass_at_1)
    rec.metric("pass_at_k", s.pass_at_k)
    rec.metric("trials", s.trials)
    rec.metric("infra_errors", s.infra_errors)
    for i, a in enumerate(s.arms, 1):
        rec.params[f"arm{i}"] = a.label
        rec.metric(f"arm{i}/pass_at_1", a.pass_at_1)
        rec.metric(f"arm{i}/pass_at_k", a.pass_at_k)
        rec.metric(f"arm{i}/trials", a.trials)
    session.run(str(job.id), f"run {job.id}", rec, status="KILLED" if interrupted else "FINISHED")


__all__ = ["CycleTracking", "ReportToOpt", "close_tracking", "generation_params_of", "open_tracking", "track_phase",
           "track_run"]
