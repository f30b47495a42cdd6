"""`rsi cycle`: one generation through discover -> expand -> update -> promote, as one parent job.

The cycle job (kind `cycle`) records, in its params, the budget split and each phase as it starts:
`phases.<name> = {"status": "running" | "done" | "stopped" | "no_candidate", "job": ID, ...}`.
A phase job's id is recorded as soon as the phase has created it (found by kind, generation and
start time; the first child stage's progress hook records it), so `rsi cycle --resume CYCLE` after a
kill skips finished phases and continues the unfinished one with that phase's own resume.

Budget (trials): promote must measure every holdout task K times (and every suite task
`suite_trials_per_task` times) for both generations or the gates cannot pass, so its need is set aside
first (when the holdout has fewer units, templates by default, than the paired test's minimum, discover
tops it up with holdout tasks of templates it lacks to that minimum plus one spare, and promote's share
counts those); what is left is
split discover 40% / expand 60% (`discover_share`). Update runs no trials.
The split is stored with the job, so a resume keeps it.

Update with no trainable trajectory (nothing accepted, everything refused) ends the cycle with the
reason (`no_candidate`), not a crash; so does a training run that leaves no candidate.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from rsi.core.errors import ConfigError, InputError
from rsi.core.promotion import unit_word
from rsi.core.task import HoldoutPart
from rsi.loop.context import WorkspaceContext
from rsi.loop.cycle.in_skill import in_skill_draw
from rsi.loop.cycle.jobs import _end, _open_job
from rsi.loop.cycle.request import CycleRequest
from rsi.loop.cycle.split import (
    holdout_deficits,
    holdout_goal,
    holdout_part_units,
    in_template_count,
    plan_split,
)
from rsi.loop.discover.phase import DiscoverRequest, discover
from rsi.loop.expand.phase import ExpandRequest, expand
from rsi.loop.hooks import CycleHooks, DiscoverHooks, ExpandHooks, Progress
from rsi.loop.promote.phase import PromoteRequest, holdout_tasks, promote
from rsi.loop.suites import suite_tasks
from rsi.loop.update.phase import UpdateFailed, UpdateRequest, run_update

PHASES = ("discover", "expand", "update", "promote")
COMPOSE_SEED = 104_729  # the train compositions' discover seed, offset from the cycle's


@dataclass
class CycleOutcome:
    job_id: str
    generation: str
    split: dict[str, float]
    phases: dict[str, dict[str, Any]]
    candidate: str | None = None
    verdict: str | None = None  # promoted | rejected | dry | None
    stopped: str | None = None  # why the cycle ended before promote decided (no candidate, interrupted)
    wall_sec: float = 0.0
    results: dict[str, Any] = field(default_factory=dict)  # each phase's own outcome object (this run only)

    def as_json(self) -> dict[str, Any]:
        return {"job": self.job_id, "generation": self.generation, "split": self.split, "phases": self.phases,
                "candidate": self.candidate, "verdict": self.verdict, "stopped": self.stopped,
                "wall_sec": round(self.wall_sec, 2)}


class _Cycle:
    def __init__(self, ctx: WorkspaceContext, req: CycleRequest, hooks: CycleHooks, job_id: str,
                 gen: str, split: dict[str, float]) -> None:
        self.ctx, self.req, self.hooks, self.job_id, self.gen, self.split = ctx, req, hooks, job_id, gen, split
        self.results: dict[str, Any] = {}
        params = ctx.store.get_job(job_id).params
        self.seed = int(params.get("seed") or 0)  # fixed when the cycle was opened
        # the cycle's number in the workspace: with the side it keys the stream discover draws instances from
        self.number = int(params.get("cycle") or 0)

    # -- the record ----------------------------------------------------------------------------
    def phases(self) -> dict[str, dict[str, Any]]:
        return dict(self.ctx.store.get_job(self.job_id).params.get("phases") or {})

    def record(self, name: str, **info: Any) -> None:
        store = self.ctx.store
        phases = self.phases()
        phases[name] = {**phases.get(name, {}), **info}
        store.acquire_driver()
        try:
            store.merge_job_params(self.job_id, {"phases": phases})
        finally:
            store.release_driver()

    def find_job(self, name: str, started_key: str = "started_at", job_key: str = "job") -> str | None:
        """The phase job this cycle started: recorded, else the newest of its kind since the phase (or, with
        other keys, a second job of the phase, like discover's holdout top-up) began."""
        info = self.phases().get(name, {})
        if info.get(job_key):
            return str(info[job_key])
        since = info.get(started_key)
        if since is None:
            return None
        start = datetime.fromisoformat(since).replace(tzinfo=None)
        jobs = [j for j in self.ctx.store.jobs_of(kind=name)
                if j.created_at.replace(tzinfo=None) >= start and j.parent_job is None
                and (name == "promote" or j.generation == self.gen)]
        if not jobs:
            return None
        self.record(name, **{job_key: jobs[-1].id})
        return jobs[-1].id

    def stage_progress(self, name: str) -> Callable[[str], Progress]:
        def make(key: str) -> Progress:
            self.find_job(name)  # the phase job exists once its first stage starts
            return self.hooks.stage(name, key)
        return make

    def begin(self, name: str) -> str | None:
        """Mark the phase started (unless it already was) and return the job to resume, if any."""
        self.hooks.phase(name)
        info = self.phases().get(name, {})
        if not info.get("started_at"):
            self.record(name, status="running", started_at=datetime.now(UTC).isoformat())
            return None
        return self.find_job(name)

    # -- the phases ----------------------------------------------------------------------------
    def discover(self) -> str | None:
        """Discover new tasks; then, when the holdout's unseen templates are fewer than the paired test's minimum
        (or the request's holdout_target), top them up with a holdout-only discover (promote cannot pass
        otherwise) up to that minimum plus one spare, since the gate or the band may reject one (or up to the
        target); likewise the in-skill part up to the request's in_skill_target. All share the discover budget:
        the top-ups' estimated cost is set aside before the main discover runs."""
        resume = self.begin("discover")
        r = self.req
        info = self.phases().get("discover", {})
        budget = self.split["discover"]
        want = self._holdout_wanted()
        # set aside before the main discover: the holdout top-ups' cost and the train compositions' (their gate
        # and probe); a resume keeps what was set aside
        reserve = float(info.get("reserve", min(int(budget * 0.6), want * self._holdout_cost()
                                                + r.compositions * self._train_cost())))
        if not info.get("main_done"):
            if resume is None:
                self.record("discover", reserve=reserve)
            dreq = DiscoverRequest(resume=resume, concurrency=r.concurrency, budget=budget - reserve) if resume \
                else DiscoverRequest(n=r.n, generators=list(r.generators), generation=self.gen, attempts=r.attempts,
                                     budget=budget - reserve, seed=self.seed, cycle=self.number,
                                     concurrency=r.concurrency,
                                     probe_agent=r.probe_agent, levels=list(r.levels),
                                     probe_per_template=r.probe_per_template,
                                     train_templates=r.train_templates)
            out = self._run_discover(dreq)
            admitted = [c for c in out.candidates if c.state == "admitted"]
            self.record("discover", job=out.job_id, candidates=len(out.candidates), admitted=len(admitted),
                        holdout=sum(c.split == "holdout" for c in admitted), reason=out.reason,
                        status="stopped" if out.interrupted else "running", main_done=not out.interrupted
                        or "budget spent" in (out.reason or ""))
            # a spent discover budget is not a failure of the cycle: what was admitted is used
            if out.interrupted and "budget spent" not in (out.reason or ""):
                return f"discover stopped: {out.reason}"
        if r.compositions and (stop := self._compositions(budget)):
            return stop
        for part, deficit in holdout_deficits(self.ctx, r.holdout_target, r.in_skill_target, self.number).items():
            if deficit and (stop := self._top_up(part, deficit, budget)):
                return stop
        self.record("discover", status="done")
        return None

    def _top_up(self, part: HoldoutPart, deficit: int, budget: float) -> str | None:
        """A holdout-only discover adding `deficit` templates to holdout `part` (resumed if it was started)."""
        r, tag = self.req, "holdout" if part == "unseen" else "holdout_in_skill"
        info = self.phases()["discover"]
        # what the main discover, the compositions and the earlier top-up spent (a discover job's budget counts
        # its own trials)
        before = ("job", "compose_job") if part == "unseen" else ("job", "compose_job", "holdout_job")
        left = budget - sum(self._spent(str(info[k])) for k in before if info.get(k))
        hjob = self.find_job("discover", f"{tag}_started_at", f"{tag}_job")
        if left < 1 and not hjob:
            return None
        if not info.get(f"{tag}_started_at"):
            self.record("discover", **{f"{tag}_started_at": datetime.now(UTC).isoformat()})
        unit = self.ctx.contract.promotion.holdout_unit
        goal = holdout_goal(self.ctx, r.holdout_target if part == "unseen" else r.in_skill_target)
        # the in-skill part is this cycle's own question: drawn for it (its tasks' instance_cycle), seed recorded
        draw = in_skill_draw(self.ctx, self.job_id, self.seed, self.number, r.levels, goal) \
            if part == "in_skill" else None
        self.hooks.message(f"holdout {part.replace('_', '-')} part: "
                           f"{len(holdout_part_units(self.ctx, self.number)[part])} {unit_word(unit)}"
                           + (f" drawn for cycle {self.number}" if draw else "")
                           + f" ({len(holdout_tasks(self.ctx))} holdout tasks in all), {deficit} short of the "
                           f"{goal} this cycle tops it up to (holdout-only discover, up to {left:g} trials"
                           + (f"; {draw.describe()}" if draw else "") + ")")
        hreq = DiscoverRequest(resume=hjob, concurrency=r.concurrency, budget=left) if hjob else \
            DiscoverRequest(n=deficit, holdout_only=True, part=part,
                            generators=list(draw.generators if draw and draw.generators else r.generators),
                            generation=self.gen, attempts=r.attempts, budget=left,
                            seed=draw.seed if draw else self.seed + 7919, cycle=self.number,
                            concurrency=r.concurrency, probe_agent=r.probe_agent,
                            levels=list(draw.levels if draw and draw.levels else r.levels),
                            templates=list(draw.templates) if draw else [])
        out = self._run_discover(hreq, key=f"results_{tag}")
        admitted = [c for c in out.candidates if c.state == "admitted"]
        info = self.phases()["discover"]
        self.record("discover", **{f"{tag}_job": out.job_id}, admitted=info.get("admitted", 0) + len(admitted),
                    candidates=info.get("candidates", 0) + len(out.candidates),
                    holdout=info.get("holdout", 0) + len(admitted))
        if out.interrupted and "budget spent" not in (out.reason or ""):
            self.record("discover", status="stopped", reason=out.reason)
            return f"discover stopped: {out.reason}"
        return None

    def _compositions(self, budget: float) -> str | None:
        """A train discover aimed at the train compositions of level 3 in turn (pairs of trained operations the
        template split trains as combinations; rsi.loop.discover.generators.compose), `req.compositions` of them
        beyond the main discover's: the in-skill part asks for *held-out* combinations of trained operations, a
        skill the single operations alone never show (issue 46). Resumed if it was started; the holdout
        top-ups' reserve stays untouched."""
        r, tag = self.req, "compose"
        info = self.phases()["discover"]
        if info.get(f"{tag}_done"):
            return None
        cjob = self.find_job("discover", f"{tag}_started_at", f"{tag}_job")
        holdout_reserve = self._holdout_wanted() * self._holdout_cost()
        left = budget - holdout_reserve - (self._spent(str(info["job"])) if info.get("job") else 0.0)
        if left < 1 and not cjob:
            self.hooks.message(f"train compositions skipped: the discover budget ({budget:g}) is spent")
            return None
        if not info.get(f"{tag}_started_at"):
            self.record("discover", **{f"{tag}_started_at": datetime.now(UTC).isoformat()})
        self.hooks.message(f"train compositions: {r.compositions} candidate(s) of level 3 aimed at the combinations "
                           f"the split trains on (up to {left:g} trials)")
        creq = DiscoverRequest(resume=cjob, concurrency=r.concurrency, budget=left) if cjob else \
            DiscoverRequest(n=r.compositions, generators=["compose"], levels=[3], train_templates=True,
                            generation=self.gen, attempts=r.attempts, budget=left, seed=self.seed + COMPOSE_SEED,
                            cycle=self.number, concurrency=r.concurrency, probe_agent=r.probe_agent,
                            probe_per_template=r.probe_per_template)
        out = self._run_discover(creq, key=f"results_{tag}")
        admitted = [c for c in out.candidates if c.state == "admitted"]
        info = self.phases()["discover"]
        self.record("discover", **{f"{tag}_job": out.job_id, f"{tag}_admitted": len(admitted)},
                    admitted=info.get("admitted", 0) + len(admitted),
                    candidates=info.get("candidates", 0) + len(out.candidates),
                    **{f"{tag}_done": not out.interrupted or "budget spent" in (out.reason or "")})
        if out.interrupted and "budget spent" not in (out.reason or ""):
            self.record("discover", status="stopped", reason=out.reason)
            return f"discover stopped: {out.reason}"
        return None

    def _train_cost(self) -> int:
        """Trials one train candidate costs at most: oracle runs, nop, known-wrong answers (about 3), its probes."""
        return self.ctx.contract.discovery.oracle_runs + 1 + 3 + int(self.req.attempts or
                                                                     self.ctx.contract.discovery.probe_attempts)

    def _holdout_wanted(self) -> int:
        """Holdout units (templates) to add, both parts together (rsi.loop.cycle.split.holdout_deficits)."""
        return sum(holdout_deficits(self.ctx, self.req.holdout_target, self.req.in_skill_target,
                                    self.number).values())

    def _holdout_cost(self) -> int:
        """Trials one holdout candidate costs at most: oracle runs, nop, known-wrong answers (about 3); a holdout
        candidate is admitted on validity alone, so no probe."""
        return self.ctx.contract.discovery.oracle_runs + 1 + 3

    def _spent(self, job_id: str) -> float:
        return float(sum(len(self.ctx.store.trials(j.id)) for j in self.ctx.store.child_jobs(job_id)))

    def _run_discover(self, dreq: DiscoverRequest, key: str = "discover") -> Any:
        outer = self

        class Hooks(DiscoverHooks):
            def message(self, text: str) -> None:
                outer.hooks.message(text)

            def stage(self, name: str) -> Progress:
                # the job exists once its first stage starts: record its id so a kill can resume it
                if key == "discover":
                    outer.find_job("discover")
                else:
                    tag = key.removeprefix("results_")
                    outer.find_job("discover", f"{tag}_started_at", f"{tag}_job")
                return outer.hooks.stage("discover", name)

        out = discover(self.ctx, dreq, Hooks(), provider=self.req.provider)
        self.results[key] = out
        return out

    def expand(self) -> str | None:
        resume = self.begin("expand")
        r = self.req
        outer = self

        class Hooks(ExpandHooks):
            def message(self, text: str) -> None:
                outer.hooks.message(text)

            def stage(self, key: str) -> Progress:
                return outer.stage_progress("expand")(key)

        if resume is None:
            self.replan_promote()
        # a resumed expand runs with its own job's settings: the cycle's (perhaps other) options are not passed
        settings = {} if resume else {"generation": self.gen, "attempts": r.expand_attempts,
                                      "proposals": r.proposals, "seed": self.seed, "sources": r.sources,
                                      "baseline_per_template": r.baseline_per_template, "search": r.search,
                                      **({"fewshot": r.fewshot} if r.fewshot is not None else {})}
        ereq = ExpandRequest(budget=self.split["expand"], resume=resume, concurrency=r.concurrency,
                             round_size=r.round_size, reflector=r.reflector, provider=r.provider,
                             trial_env_hook=r.trial_env_hook, **settings)  # type: ignore[arg-type]
        try:
            out = expand(self.ctx, ereq, Hooks())
        except InputError as e:  # its share cannot cover the baseline: update still has discover's probes
            why = f"expand skipped: {e}"
            self.hooks.message(why)
            self.record("expand", status="done", skipped=why, trials=0)
            return None
        self.results["expand"] = out
        stopped = out.interrupted and "budget spent" not in (out.reason or "")
        self.record("expand", job=out.job_id, status="stopped" if stopped else "done", reason=out.reason,
                    baseline_rate=out.baseline.rate, adopted=out.adopted.get("name"),
                    adopted_new=bool(out.adopted.get("new", True)), trials=out.trials, integrity=out.integrity)
        return f"expand stopped: {out.reason}" if stopped else None

    def replan_promote(self) -> None:
        """Promote measures every holdout task discover left (its band decides, not the plan): when that
        costs more than promote's share, the difference comes out of expand's, so the total holds."""
        promo = self.ctx.contract.promotion
        try:
            suite = len(suite_tasks(self.ctx))
        except InputError:
            suite = 0  # promote names the missing suite
        need = float(2 * promo.trials_per_task * len(holdout_tasks(self.ctx)) + 2 * promo.suite_trials_per_task * suite
                     + 2 * promo.in_template_trials_per_task * in_template_count(self.ctx))
        if need <= self.split["promote"]:
            return
        more = need - self.split["promote"]
        self.split = {**self.split, "promote": need, "expand": max(0.0, self.split["expand"] - more)}
        self.hooks.message(f"holdout: {len(holdout_tasks(self.ctx))} tasks after discover; promote needs {need:g} "
                           f"trials, {more:g} more than planned, taken from expand (now {self.split['expand']:g})")
        store = self.ctx.store
        store.acquire_driver()
        try:
            store.merge_job_params(self.job_id, {"split": self.split})
        finally:
            store.release_driver()

    def update(self) -> str | None:
        self.begin("update")
        r = self.req
        expand_job = self.phases().get("expand", {}).get("job")
        ureq = UpdateRequest(gen=self.gen, backend=r.backend, command=r.command, steps=r.steps, load=r.load,
                             from_jobs=[], log=self.hooks.message, progress=self.hooks.train_step)
        try:
            out = run_update(ureq, self.ctx.ws.root)
        except (ConfigError, UpdateFailed) as e:
            why = f"update made no candidate: {e}"
            self.record("update", status="no_candidate", reason=why, expand_job=expand_job)
            return why
        self.results["update"] = out
        if out.candidate is None:
            why = f"update made no candidate: backend {out.backend} exported a dataset only ({out.dataset['path']})"
            self.record("update", status="no_candidate", run=out.run_id, reason=why)
            return why
        samples = out.selection.get("samples") or {}
        self.record("update", status="done", run=out.run_id, candidate=out.candidate,
                    accepted=out.selection.get("accepted"), steps=out.training.get("steps"),
                    samples=samples.get("by_source", {}), templates=len(samples.get("by_template", {})),
                    families=samples.get("by_family", {}),
                    leakage=(out.selection.get("leakage") or {}).get("max_reference_overlap"))
        return None

    def promote(self) -> str | None:
        resume = self.begin("promote")
        cand = self.phases().get("update", {}).get("candidate")
        if not cand:
            return "no candidate to promote"
        r = self.req
        outer = self

        class Bar(Progress):
            def __init__(self) -> None:
                self.inner = outer.stage_progress("promote")("holdout")

            def start(self, total: int, done: int, job_id: str) -> None:
                self.inner.start(total, done, job_id)

            def trial_finished(self, spec: Any, result: Any) -> None:
                self.inner.trial_finished(spec, result)

        out = promote(self.ctx, PromoteRequest(cand, concurrency=r.concurrency, resume=resume,
                                               agent=r.promote_agent), Bar(), provider=r.provider)
        self.results["promote"] = out
        v = out.verdict
        self.record("promote", job=out.job_id, status="stopped" if out.interrupted else "done",
                    passed=v.passed, parent_rate=v.parent_rate, candidate_rate=v.candidate_rate, delta=v.delta,
                    p_value=v.p_value, holdout_tasks=v.n_tasks, holdout_units=v.n_units, unit=v.unit,
                    task_delta=v.task_delta, task_p_value=v.task_p_value, skipped=out.skipped, reason=out.interrupted,
                    failing=[g.name for g in v.failing], parent=out.parent,
                    suite_tasks=v.suite.tasks if v.suite else 0,
                    suite_parent_rate=v.suite.parent if v.suite else None,
                    suite_candidate_rate=v.suite.candidate if v.suite else None,
                    suite_p_value=v.suite.p_value if v.suite else None,
                    in_template_tasks=v.in_template.tasks if v.in_template else 0,
                    in_template_parent_rate=v.in_template.parent if v.in_template else None,
                    in_template_candidate_rate=v.in_template.candidate if v.in_template else None,
                    in_template_p_value=v.in_template.p_value if v.in_template else None,
                    parts=[{"part": pr.part, "role": pr.role, "tasks": pr.tasks, "units": pr.units,
                            "parent_rate": pr.parent, "candidate_rate": pr.candidate, "p_value": pr.p_value,
                            "ni_p_value": pr.ni_p_value, "ni_lower": pr.ni_lower, "ni_level": pr.ni_level}
                           for pr in v.parts],
                    rounds=v.sequential.rounds_run if v.sequential else 1, bound=v.bound)
        return f"promote stopped: {out.interrupted}" if out.interrupted else None


def cycle(ctx: WorkspaceContext, req: CycleRequest, hooks: CycleHooks | None = None) -> CycleOutcome:
    """Run (or resume) one cycle; see the module docstring."""
    t0 = time.monotonic()
    hooks = hooks or CycleHooks()
    store = ctx.store
    done = _finished(ctx, req.resume)
    if done is not None:  # its summary and report again (e.g. the report's write failed at the end)
        hooks.message(f"cycle {done.job_id} finished earlier: its outcome from the store (nothing is re-run)")
        return done
    job_id, gen, split = _open_job(ctx, req)
    hooks.message(f"cycle {job_id} on {gen}: budget {sum(split.values()):g} trials = discover {split['discover']:g}"
                  f" + expand {split['expand']:g} + promote {split['promote']:g} (update runs no trials); seed "
                  f"{store.get_job(job_id).params.get('seed')}")
    run = _Cycle(ctx, req, hooks, job_id, gen, split)
    hooks.cycle_started(job_id, gen, split)
    stopped: str | None = None
    try:
        for name in PHASES:
            info = run.phases().get(name, {})
            if info.get("status") in ("done",):
                hooks.message(f"{name}: done earlier ({info.get('job') or info.get('run') or '-'}), skipped")
                continue
            if info.get("status") == "no_candidate":
                stopped = str(info.get("reason"))
                break
            stopped = getattr(run, name)()
            hooks.phase_done(name, run.phases().get(name, {}), run.results.get(name))
            if stopped:
                break
    except KeyboardInterrupt:  # like a run job: Ctrl-C ends the cycle resumably, with an outcome to print
        stopped = "interrupted (Ctrl-C)"
    except BaseException as e:
        _end(store, job_id, f"{type(e).__name__}: {e}; resume with `rsi cycle --resume {job_id}`")
        raise
    phases = run.phases()
    cand = phases.get("update", {}).get("candidate")
    prom = phases.get("promote", {})
    verdict = None
    if prom.get("status") == "done":
        verdict = "promoted" if prom.get("passed") else "rejected"
    final = stopped is None or phases.get("update", {}).get("status") == "no_candidate"
    if final:
        store.acquire_driver()
        try:
            store.merge_job_params(job_id, {"verdict": verdict, "stopped": stopped})
            store.finish_job(job_id, "done")
        finally:
            store.release_driver()
    else:
        _end(store, job_id, f"{stopped}; resume with `rsi cycle --resume {job_id}`")
    outcome = CycleOutcome(job_id, gen, run.split, phases, cand, verdict, stopped, time.monotonic() - t0, run.results)
    hooks.cycle_done(outcome)
    return outcome


def _finished(ctx: WorkspaceContext, resume: str | None) -> CycleOutcome | None:
    """A finished cycle's outcome as recorded (`--resume` of a cycle that is done), else None."""
    if not resume:
        return None
    job = ctx.store.get_job(resume)
    if job.kind != "cycle" or job.status != "done":
        return None
    p = job.params
    phases = dict(p.get("phases") or {})
    return CycleOutcome(job.id, str(job.generation), {k: float(v) for k, v in (p.get("split") or {}).items()},
                        phases, phases.get("update", {}).get("candidate"), p.get("verdict"), p.get("stopped"))


__all__ = ["CycleHooks", "CycleOutcome", "CycleRequest", "PHASES", "cycle", "holdout_goal", "plan_split"]
