"""Where a cycle's wall time goes (issue 47 item 1): per phase and per trial step, read from what a run records.

    python benchmarks/cycle_profile.py ./rsi-demo              # tables, and a record for the results page
    python benchmarks/cycle_profile.py ./rsi-demo --json       # the same figures as JSON (no record)
    python benchmarks/cycle_profile.py ./rsi-demo --commit ec64da6   # the commit the run was made on

Sources, all written by the run itself: the cycle job's phases (each phase's `started_at`; a phase lasts until the
next one starts, the last until the cycle job finished), the jobs created in each phase and their stages
(`params.stage`), every trial's start and finish in the store and its `result.json` timings (rsi.core.trial.Timings:
image build, container create/start, the agent's model calls — queue wait, and prefill and decode where the server
reports them — and sandbox commands, the inspection, commit and removal of the frozen container, the verifier's
start, run and removal; the store's own columns where a result.json is missing), and the training run (dataset
written, model loaded, forward / backward / optimiser seconds, the rest of training, registering the candidate).
A workspace without a cycle job (`rsi run`, `rsi discover`, `rsi update` by hand) is profiled as one pseudo-cycle
whose phases are its top-level jobs and training runs, oldest first.

Trials run concurrently, so each step has two totals:
- **trial-seconds**: summed over trials (what the step costs in trial time; their sum exceeds the wall clock when
  trials overlap);
- **wall**: the wall clock attributed to the step. At each instant the wall clock is split equally among the trials
  running then, and a trial's share among its steps in proportion to their seconds (a trial's steps are taken as
  spread evenly over its interval: an approximation). Time in a phase with no trial running (generating and
  checking candidates, selecting, training, bookkeeping) has rows of its own, so the wall column adds up to the
  cycle's wall time.
Results written before the finer spans existed show their agent and verify time as "(not split)".
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from _records import Recorder

STEPS = (
    "image build",
    "container create/start",
    "model queue wait",
    "model prefill",
    "model decode",
    "model call other (HTTP, tokenise, parse)",
    "model calls (not split)",
    "agent sandbox exec",
    "agent harness other",
    "agent (not split)",
    "inspect (artifacts, changes, tamper check)",
    "snapshot commit",
    "container remove",
    "verifier exec",
    "verify other (reward read; shared level or not split)",
    "verdict + environment record",
    "outside spans (retries, cleanup, recording)",
)
TRAINING = ("training: model load + tokenise", "training: forward", "training: backward",
            "training: optimizer step", "training: steps (not split)", "training: validation, eval, save")


def _dt(v: Any) -> datetime | None:
    """A naive UTC datetime from a store value or an ISO string (the store keeps naive UTC)."""
    if v is None:
        return None
    t = v if isinstance(v, datetime) else datetime.fromisoformat(str(v).replace(" ", "T"))
    return t.astimezone(UTC).replace(tzinfo=None) if t.tzinfo else t


def trial_steps(t: dict[str, float]) -> dict[str, float]:
    """One trial's seconds per step from its Timings (a dict; absent fields count 0). The finer spans are carved out
    of the coarse ones; where a result has none of them (an older one), the coarse span is reported unsplit."""
    g = {k: float(t.get(k) or 0.0) for k in ("build", "start", "agent", "snapshot", "verify", "total", "model_queue",
                                              "model", "model_prefill", "model_decode", "sandbox_exec", "commit",
                                              "agent_remove", "verify_start", "verify_exec", "verify_remove", "record")}
    out = dict.fromkeys(STEPS, 0.0)
    out["image build"] = g["build"]
    out["container create/start"] = g["start"] + g["verify_start"]
    out["model queue wait"] = g["model_queue"]
    if g["model"] > 0 or g["sandbox_exec"] > 0:
        if g["model_prefill"] + g["model_decode"] > 0:
            out["model prefill"], out["model decode"] = g["model_prefill"], g["model_decode"]
            out["model call other (HTTP, tokenise, parse)"] = max(
                0.0, g["model"] - g["model_queue"] - g["model_prefill"] - g["model_decode"])
        else:
            out["model calls (not split)"] = max(0.0, g["model"] - g["model_queue"])
        out["agent sandbox exec"] = g["sandbox_exec"]
        out["agent harness other"] = max(0.0, g["agent"] - max(g["model"], g["model_queue"]) - g["sandbox_exec"])
    else:
        out["agent (not split)"] = max(0.0, g["agent"] - g["model_queue"])
    out["snapshot commit"] = g["commit"]
    out["container remove"] = g["agent_remove"] + g["verify_remove"]
    out["inspect (artifacts, changes, tamper check)"] = max(0.0, g["snapshot"] - g["commit"] - g["agent_remove"])
    out["verifier exec"] = g["verify_exec"]
    out["verify other (reward read; shared level or not split)"] = max(
        0.0, g["verify"] - g["verify_start"] - g["verify_exec"] - g["verify_remove"])
    out["verdict + environment record"] = g["record"]
    spans = g["build"] + g["start"] + g["agent"] + g["snapshot"] + g["verify"]
    out["outside spans (retries, cleanup, recording)"] = max(0.0, g["total"] - spans)
    return out


@dataclass
class Trial:
    stage: str
    start: datetime
    end: datetime
    steps: dict[str, float]

    def __post_init__(self) -> None:  # the interval beyond the last attempt's spans: retries, cleanup, recording
        beyond = (self.end - self.start).total_seconds() - sum(self.steps.values())
        if beyond > 0:
            self.steps["outside spans (retries, cleanup, recording)"] += beyond


def wall_shares(trials: list[Trial], lo: datetime, hi: datetime) -> list[float]:
    """Each trial's share of the wall clock in [lo, hi]: at every instant the wall is split equally among the
    trials running then."""
    events: list[tuple[datetime, int, int]] = []
    for i, t in enumerate(trials):
        s, e = max(t.start, lo), min(t.end, hi)
        if e > s:
            events += [(s, 1, i), (e, -1, i)]
    events.sort(key=lambda x: (x[0], x[1]))
    shares = [0.0] * len(trials)
    live: set[int] = set()
    prev: datetime | None = None
    for at, kind, i in events:
        if prev is not None and live and at > prev:
            each = (at - prev).total_seconds() / len(live)
            for j in live:
                shares[j] += each
        prev = at
        if kind > 0:
            live.add(i)
        else:
            live.discard(i)
    return shares


@dataclass
class Part:
    name: str
    wall_sec: float


@dataclass
class PhaseProfile:
    name: str
    wall_sec: float
    trials: int = 0
    parts: list[Part] = field(default_factory=list)


@dataclass
class CycleProfile:
    id: str
    wall_sec: float
    phases: list[PhaseProfile] = field(default_factory=list)
    # step -> {"trial": trial-seconds, "wall": attributed wall seconds, "<phase>": trial-seconds in that phase}
    steps: dict[str, dict[str, float]] = field(default_factory=dict)
    trials: int = 0

    def add(self, step: str, phase: str, trial: float | None, wall: float) -> None:
        row = self.steps.setdefault(step, {"trial": 0.0, "wall": 0.0})
        row["wall"] += wall
        if trial is not None:
            row["trial"] += trial
            row[phase] = row.get(phase, 0.0) + trial

    def as_json(self) -> dict[str, Any]:
        trial_total = sum(r["trial"] for r in self.steps.values()) or 1.0
        return {"id": self.id, "wall_sec": round(self.wall_sec, 2), "trials": self.trials,
                "phases": [{**asdict(p), "share": p.wall_sec / self.wall_sec if self.wall_sec else 0.0}
                           for p in self.phases],
                "steps": [{"step": k, "trial_sec": round(v["trial"], 3), "trial_share": v["trial"] / trial_total,
                           "wall_sec": round(v["wall"], 3),
                           "wall_share": v["wall"] / self.wall_sec if self.wall_sec else 0.0,
                           "by_phase": {p: round(s, 3) for p, s in v.items() if p not in ("trial", "wall") and s}}
                          for k, v in self.steps.items() if v["trial"] > 0 or v["wall"] > 0]}


class Source:
    """What the profile reads from a workspace's store (and its trials' result.json files)."""

    def __init__(self, store: Any, root: Path) -> None:
        self.store, self.root = store, root
        self.jobs = list(reversed(store.list_jobs(100_000)))  # oldest first
        self.runs = sorted(store.training_runs(), key=lambda r: _dt(r.created_at) or datetime.min)

    def timings(self, row: Any) -> dict[str, float]:
        path = Path(row.trial_dir)
        path = (path if path.is_absolute() else self.root / path) / "result.json"
        try:
            return dict(json.loads(path.read_text()).get("timings") or {})
        except (OSError, ValueError):  # the store's columns (no container start, no finer spans)
            return {"build": row.t_build, "agent": row.t_agent, "snapshot": row.t_snapshot, "verify": row.t_verify,
                    "total": row.t_total, "model_queue": row.t_queue}

    def trials(self, jobs: list[Any]) -> list[Trial]:
        out = []
        for job in jobs:
            stage = str(job.params.get("stage") or job.kind)
            for row in self.store.trials(job.id):
                start, end = _dt(row.started_at), _dt(row.finished_at)
                if row.status == "done" and start is not None and end is not None and end >= start:
                    out.append(Trial(stage, start, end, trial_steps(self.timings(row))))
        return out


def _job_end(job: Any) -> datetime:
    return _dt(job.finished_at) or _dt(job.updated_at) or _dt(job.created_at) or datetime.min


def trial_phase(prof: CycleProfile, name: str, lo: datetime, hi: datetime, trials: list[Trial],
                idle_label: str, column: str | None = None) -> PhaseProfile:
    """A phase that runs trials: its stages' attributed wall and the wall with no trial running (its steps go to the
    step table's `column`, by default the phase's name)."""
    column = column or name
    wall = max(0.0, (hi - lo).total_seconds())
    shares = wall_shares(trials, lo, hi)
    ph = PhaseProfile(name, wall, trials=len(trials))
    by_stage: dict[str, float] = {}
    for t, share in zip(trials, shares, strict=True):
        by_stage[t.stage] = by_stage.get(t.stage, 0.0) + share
        tot = sum(t.steps.values())
        for step, sec in t.steps.items():
            prof.add(step, column, sec, share * sec / tot if tot > 0 else 0.0)
    busy = sum(shares)
    ph.parts = [Part(f"stage {k} (trials)", v) for k, v in by_stage.items()]
    ph.parts.append(Part(idle_label, max(0.0, wall - busy)))
    prof.add(f"{column}: no trial running", column, None, max(0.0, wall - busy))
    return ph


def update_phase(prof: CycleProfile, name: str, lo: datetime, hi: datetime, runs: list[Any],
                 column: str | None = None) -> PhaseProfile:
    """A phase that trains: the dataset, the training run's own split and what came after."""
    column = column or name
    wall = max(0.0, (hi - lo).total_seconds())
    ph = PhaseProfile(name, wall)
    used = 0.0
    for run in runs:
        start, end = _dt(run.created_at) or lo, _dt(run.finished_at) or hi
        if start > lo and not used:
            ph.parts.append(Part("dataset (select, leakage check, export)", (start - lo).total_seconds()))
        window = max(0.0, (min(end, hi) - start).total_seconds())
        tr = run.metrics.get("training") or {}
        tp = tr.get("throughput") or {}
        if not tr.get("wall_sec"):  # a failed run, another backend, a MoL run: its window only
            ph.parts.append(Part(f"training run {run.status} (not split)", window))
            used = (end - lo).total_seconds()
            continue
        train_wall = min(window, float(tr.get("wall_sec") or window))
        split = {TRAINING[0]: float(tp.get("setup_sec") or 0.0), TRAINING[1]: float(tp.get("forward_sec") or 0.0),
                 TRAINING[2]: float(tp.get("backward_sec") or 0.0), TRAINING[3]: float(tp.get("optimizer_sec") or 0.0)}
        if not any(split[k] for k in TRAINING[1:4]):
            split[TRAINING[4]] = float(tp.get("train_sec") or 0.0)
        split[TRAINING[5]] = max(0.0, train_wall - sum(split.values()))
        for k, v in split.items():
            if v > 0:
                ph.parts.append(Part(k, v))
                prof.add(k, column, None, v)
        ph.parts.append(Part("adapter check, register, load into the server", max(0.0, window - train_wall)))
        used = (end - lo).total_seconds()
    rest = max(0.0, wall - sum(p.wall_sec for p in ph.parts))
    ph.parts.append(Part("before / after training (bookkeeping)" if runs else "update (no training run)", rest))
    trained = sum(p.wall_sec for p in ph.parts if p.name in TRAINING)
    prof.add(f"{column}: not training", column, None, max(0.0, wall - trained))
    return ph


IDLE = {"discover": "generate + check candidates, admit (no trial running)",
        "expand": "plan, propose configs, select (no trial running)",
        "promote": "plan, reuse, gate (no trial running)"}


def cycle_profile(src: Source, job: Any) -> CycleProfile:
    """One cycle job: each phase from its start to the next phase's (the last one to the cycle's end)."""
    phases = job.params.get("phases") or {}
    starts = sorted((t, name) for name, info in phases.items() if (t := _dt(info.get("started_at"))) is not None)
    begin, end = _dt(job.created_at) or datetime.min, _job_end(job)
    if starts and job.status != "done":  # unfinished: up to its last record
        end = max([end, *(_job_end(j) for j in src.jobs if (_dt(j.created_at) or begin) >= begin)])
    prof = CycleProfile(job.id, max(0.0, (end - begin).total_seconds()))
    if starts and starts[0][0] > begin:
        prof.add("cycle: before the first phase", "cycle", None, (starts[0][0] - begin).total_seconds())
    for i, (lo, name) in enumerate(starts):
        hi = starts[i + 1][0] if i + 1 < len(starts) else end
        inside = [j for j in src.jobs if j.kind != "cycle" and lo <= (_dt(j.created_at) or lo) < hi]
        if name == "update":
            runs = [r for r in src.runs if lo <= (_dt(r.created_at) or lo) < hi]
            ph = update_phase(prof, name, lo, hi, runs)
        else:
            trials = src.trials(inside)
            ph = trial_phase(prof, name, lo, hi, trials, IDLE.get(name, "no trial running"))
            prof.trials += len(trials)
        prof.phases.append(ph)
    return prof


def loose_profile(src: Source) -> CycleProfile | None:
    """A workspace without cycle jobs: its top-level jobs and training runs, oldest first, as the phases."""
    top = [j for j in src.jobs if j.parent_job is None and j.kind != "cycle"]
    if not top and not src.runs:
        return None
    prof = CycleProfile("top-level jobs, no cycle job", 0.0)
    items = [(_dt(j.created_at) or datetime.min, "job", j) for j in top] + \
            [(_dt(r.created_at) or datetime.min, "run", r) for r in src.runs]
    for lo, what, obj in sorted(items, key=lambda x: x[0]):
        if what == "run":
            hi = _dt(obj.finished_at) or lo
            ph = update_phase(prof, f"update {obj.id}", lo, hi, [obj], column="update")
        else:
            hi = _job_end(obj)
            jobs = [obj, *(j for j in src.jobs if j.parent_job == obj.id)]
            trials = src.trials(jobs)
            label = IDLE.get(str(obj.phase or obj.kind), "no trial running")
            ph = trial_phase(prof, f"{obj.phase or obj.kind} {obj.id}", lo, hi, trials, label,
                             column=str(obj.phase or obj.kind))
            prof.trials += len(trials)
        prof.phases.append(ph)
        prof.wall_sec += ph.wall_sec
    return prof


def profile(store: Any, root: Path) -> list[CycleProfile]:
    """Every cycle of the workspace, oldest first (or the pseudo-cycle of a workspace without one)."""
    src = Source(store, root)
    cycles = [cycle_profile(src, j) for j in src.jobs if j.kind == "cycle"]
    if cycles:
        return cycles
    loose = loose_profile(src)
    return [loose] if loose is not None else []


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", text.lower()).strip("_")


def show(profiles: list[CycleProfile]) -> None:
    from rich.console import Console
    from rich.table import Table

    console = Console()
    for p in profiles:
        data = p.as_json()
        t = Table(title=f"cycle {p.id}: {p.wall_sec / 60:.1f} min wall, {p.trials} trials")
        for col in ("phase / part", "wall s", "share of cycle", "trials"):
            t.add_column(col, justify="left" if col.startswith("phase") else "right")
        for ph in p.phases:
            t.add_row(f"[bold]{ph.name}[/bold]", f"{ph.wall_sec:.1f}", f"{ph.wall_sec / (p.wall_sec or 1):.1%}",
                      str(ph.trials) if ph.trials else "")
            for part in ph.parts:
                t.add_row(f"  {part.name}", f"{part.wall_sec:.1f}", f"{part.wall_sec / (p.wall_sec or 1):.1%}", "")
        console.print(t)
        names = list(dict.fromkeys(k for row in data["steps"] for k in row["by_phase"]))
        s = Table(title="per step: trial-seconds (summed over concurrent trials) and attributed wall")
        s.add_column("step")
        for col in (*names, "trial-s", "share", "wall s", "wall share"):
            s.add_column(col, justify="right")
        for row in data["steps"]:
            by = row["by_phase"]
            trial = row["trial_sec"] > 0 or any(by.values())
            s.add_row(row["step"], *(f"{by.get(n, 0.0):.1f}" if trial else "" for n in names),
                      f"{row['trial_sec']:.1f}" if trial else "—", f"{row['trial_share']:.1%}" if trial else "",
                      f"{row['wall_sec']:.1f}", f"{row['wall_share']:.1%}")
        console.print(s)


def record(profiles: list[CycleProfile], rec: Recorder) -> None:
    """Figures `c<N>.phase.<phase>`, `c<N>.part.<phase>.<part>`, `c<N>.step.<step>` (the results page's renderer
    reads them back into the two tables)."""
    rec.wall_sec = sum(p.wall_sec for p in profiles)
    for n, p in enumerate(profiles, 1):
        data = p.as_json()
        c = f"c{n}"
        rec.add(f"{c}.wall", f"cycle {n} ({p.id}): wall time, {p.trials} trials", p.wall_sec / 60, "min")
        for ph in data["phases"]:
            key = f"{c}.phase.{_slug(ph['name'])}"
            rec.add(f"{key}.wall", f"cycle {n}: {ph['name']}", ph["wall_sec"] / 60, "min")
            rec.add(f"{key}.share", f"cycle {n}: {ph['name']}, share of the cycle", 100 * ph["share"], "%")
            for part in ph["parts"]:
                rec.add(f"{c}.part.{_slug(ph['name'])}.{_slug(part['name'])}", f"cycle {n}: {ph['name']} · "
                        f"{part['name']}", part["wall_sec"], "s")
        for row in data["steps"]:
            key = f"{c}.step.{_slug(row['step'])}"
            if row["trial_sec"] > 0:
                rec.add(f"{key}.trial", f"cycle {n}: {row['step']}, trial-seconds", row["trial_sec"], "s")
                rec.add(f"{key}.trial_share", f"cycle {n}: {row['step']}, share of trial-seconds",
                        100 * row["trial_share"], "%")
            rec.add(f"{key}.wall", f"cycle {n}: {row['step']}, attributed wall", row["wall_sec"], "s")
            rec.add(f"{key}.wall_share", f"cycle {n}: {row['step']}, share of the wall", 100 * row["wall_share"], "%")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("workspace", type=Path, nargs="?", default=Path("rsi-demo"))
    ap.add_argument("--json", action="store_true", help="print the profile as JSON (writes no record)")
    ap.add_argument("--commit", help="the commit the run was made on (default: this checkout's)")
    args = ap.parse_args(argv)
    from rsi.loop.context import WorkspaceContext

    ctx = WorkspaceContext.open(args.workspace)
    try:
        profiles = profile(ctx.store, ctx.ws.root)
    finally:
        ctx.store.close()
    if not profiles:
        print(f"{args.workspace}: no job or training run to profile", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps([p.as_json() for p in profiles], indent=2))
        return 0
    show(profiles)
    rec = Recorder("cycle_profile", "Cycle profile", argv=sys.argv[1:] if argv is None else argv, commit=args.commit,
                   context="Where a cycle's wall time goes, per phase and per trial step, read from the run's own "
                           "records (benchmarks/cycle_profile.py). Trial-seconds are summed over concurrent trials; "
                           "the wall column splits each instant equally among the trials running then, so it adds "
                           "up to the cycle's wall time.")
    record(profiles, rec)
    rec.write()
    return 0


if __name__ == "__main__":
    sys.exit(main())
