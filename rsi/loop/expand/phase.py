"""`rsi expand`: run the pool with the production harness, attribute each failure from executed
evidence, and search harness-config fixes under a budget, with no weight update.

One expand job (kind `expand`) runs its steps as child `run` jobs (rsi.loop.stages), each found
again by its stage key, so a killed expand resumes without re-paying a finished trial:
1. **preflight**: estimate the plan in the budget's unit from this generation's recorded trials;
   refuse, naming the minimum, when the budget cannot cover the baseline;
2. **baseline**: the generation's own config, K attempts per train task, less what finished
   trials (same task digest, generation and config digest) already hold;
3. **attribution controls**: oracle re-runs and a nop on each failed task (reused when recorded,
   from any generation: they call no model). With a search to pay for, they get at most half of
   what the baseline left, the most telling runs first (rsi.core.attribution.plan_controls); the
   rest run once the search is done;
4. **candidates**: the user's `--candidate` patches, the config's `search_space` variants,
   `fewshot` candidates (k demonstrations drawn from the generation's own passing train trajectories,
   rsi.loop.expand.fewshot) and reflective proposals (all contract-checked), asked of
   `expand.proposer` in rsi.yaml when set, else of the generation's own model;
5. **search** rounds (`adaptive` | `random` | `grid`, rsi.core.search) until the budget is spent
   or nothing is left worth running; verdicts are revised after every round;
6. **outcome** (rsi.loop.expand.outcome): coverage, best single config, the adopted config.
The budget (limit, and spent per phase, computed from the recorded trials) is stored with the job;
`--resume JOB --budget M` continues with a larger limit and refuses changed settings.
"""

from __future__ import annotations

import contextlib
import fnmatch
import math
import os
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsi.core.arm import Arm
from rsi.core.attribution import plan_controls
from rsi.core.budget import UNITS
from rsi.core.errors import ConfigError, InputError
from rsi.core.search import EXPLORE_ATTEMPTS, STRATEGIES, next_cells
from rsi.core.task import Task
from rsi.exec.trial import TrialEnv
from rsi.exec.verifier_offline import check_verifiers_offline
from rsi.loop.arms import ArmPlan, resolve_arms
from rsi.loop.context import WorkspaceContext
from rsi.loop.expand.candidates import (
    ModelReflector,
    Reflector,
    candidate_plans,
    manual_candidates,
    manual_patches,
    reflective_candidates,
    search_space_candidates,
)
from rsi.loop.expand.evidence import BASELINE, Pool, read_book, record_verdicts, search_state, verdicts
from rsi.loop.expand.fewshot import DEFAULT_K, demo_tasks, fewshot_candidates
from rsi.loop.expand.fewshot import ORIGIN as FEWSHOT_ORIGIN
from rsi.loop.expand.outcome import ExpandOutcome, Preflight, build_outcome, preflight
from rsi.loop.expand.sources import SourcesPlan, run_sources, sources_summary
from rsi.loop.hooks import ExpandHooks
from rsi.loop.run import new_job_id, tasks_fingerprint
from rsi.loop.stages import ChildJobs, Stage, row_cost
from rsi.sandbox.base import SandboxProvider
from rsi.store.files import load_pool

NON_POOL_STATES = ("retired", "candidate", "rejected")


@dataclass
class ExpandRequest:
    budget: float | None = None  # default on a new job: 60 trials
    unit: str = "trials"
    generation: str | None = None
    tasks: str | None = None  # a glob over task names
    strategy: str = "adaptive"
    seed: int = 0
    attempts: int = 2  # baseline attempts per task
    resume: str | None = None
    concurrency: int = 2
    proposals: int = 2  # reflective proposals to ask for
    round_size: int | None = None  # cells planned per search round (None: the concurrency, one wave)
    fewshot: int = DEFAULT_K  # demonstrations per few-shot candidate (0: none)
    explore: int = EXPLORE_ATTEMPTS  # attempts exploration gives one (candidate, unsolved task) at most
    # training-data sources run after the baseline (rsi.loop.expand.sources): replays and the hint ladder
    sources: SourcesPlan = field(default_factory=SourcesPlan)
    # the baseline, its attribution and the search run on at most this many train tasks per template (those the
    # generation already ran first, e.g. discover's probes); the sources cover every train task. None: all.
    baseline_per_template: int | None = None
    search: bool = True  # False: no config search (baseline, attribution and the sources only)
    candidates: list[str] = field(default_factory=list)  # --candidate: YAML patch files or inline patches
    reflector: Reflector | None = None  # default: the generation's model (None + proposals=0: none)
    provider: SandboxProvider | None = None  # tests inject a fake
    trial_env_hook: Callable[[TrialEnv], None] | None = None


@dataclass
class _Run:
    ctx: WorkspaceContext
    job_id: str
    req: ExpandRequest
    gen_id: str
    base: ArmPlan
    pool: Pool
    runner: ChildJobs
    hooks: ExpandHooks
    limit: float
    per_trial: float  # the preflight's cost of one harness trial in the budget's unit
    per_control: float = 1.0  # ... and of one oracle/nop run
    plans: dict[str, ArmPlan] = field(default_factory=dict)
    searched_out: bool = False  # the search (not the baseline or attribution) spent the budget
    manual: list[dict[str, Any]] = field(default_factory=list)  # the checked --candidate patches
    everything: Pool | None = None  # every train task (the sources' pool; `pool` may be a sample of it)


def pool_tasks(ctx: WorkspaceContext, glob: str | None) -> list[Task]:
    """The workspace's train tasks (discovered ones included), less retired, candidate and rejected."""
    gone = {r.digest for s in NON_POOL_STATES for r in ctx.store.task_rows(state=s)}
    tasks = [t for t in load_pool(ctx.ws.tasks_dir) if t.split == "train" and t.digest not in gone]
    if glob:
        tasks = [t for t in tasks if fnmatch.fnmatchcase(t.name, glob)]
    return tasks


def sample_per_template(ctx: WorkspaceContext, gen_id: str, config_digest: str, tasks: list[Task],
                        k: int | None) -> list[Task]:
    """At most `k` tasks per template (None: all): those with finished trials of this generation and config first
    (discover's probes: reused, so free), then by name."""
    if k is None:
        return tasks
    ran = {r.task_digest for r in ctx.store.outcomes("expand", generation=gen_id, agent="harness",
                                                      task_digests=[t.digest for t in tasks])
           if r.harness_config_digest == config_digest}
    by: dict[str, list[Task]] = {}
    for t in sorted(tasks, key=lambda t: (t.digest not in ran, t.name)):
        by.setdefault(t.spec.metadata.rsi.template or t.name, []).append(t)
    keep = {t.name for group in by.values() for t in group[:k]}
    return [t for t in tasks if t.name in keep]


def _params(req: ExpandRequest, gen: str, tasks: list[Task], base_digest: str,
            manual: list[dict[str, Any]]) -> dict[str, Any]:
    return {"generation": gen, "tasks": req.tasks, "tasks_fingerprint": tasks_fingerprint(tasks),
            "strategy": req.strategy, "seed": req.seed, "attempts": req.attempts, "unit": req.unit,
            "proposals": req.proposals, "config_digest": base_digest, "round_size": req.round_size,
            "candidates": manual, "fewshot": req.fewshot, "explore": req.explore,
            "baseline_per_template": req.baseline_per_template, "search": req.search,
            "sources": {"replays": req.sources.replays, "hints": list(req.sources.hints),
                        "hint_attempts": req.sources.hint_attempts, "hint_tasks": req.sources.hint_tasks,
                        "replay_style": req.sources.replay_style}}


def _check(req: ExpandRequest) -> None:
    if req.strategy not in STRATEGIES:
        raise InputError("--strategy", None, f"'{req.strategy}' is not one of {', '.join(STRATEGIES)}")
    if req.unit not in UNITS:
        raise InputError("--unit", None, f"'{req.unit}' is not one of {', '.join(UNITS)}")
    if req.budget is not None and req.budget <= 0:
        raise InputError("--budget", None, "must be more than 0")
    if req.attempts < 1:
        raise InputError("--attempts", None, "must be at least 1")
    if req.round_size is not None and req.round_size < 1:
        raise InputError("--round-size", None, "must be at least 1")
    if req.concurrency < 1:
        raise InputError("--concurrency", None, "must be at least 1")
    if req.proposals < 0:
        raise InputError("--proposals", None, "must be 0 or more")
    if req.fewshot < 0:
        raise InputError("--fewshot", None, "must be 0 or more")
    if req.explore < 1:
        raise InputError("--explore", None, "must be at least 1")
    if req.baseline_per_template is not None and req.baseline_per_template < 1:
        raise InputError("--baseline-per-template", None, "must be at least 1")
    for why in req.sources.check():
        flag, _, msg = why.partition(": ")
        raise InputError(flag, None, msg)


def expand(ctx: WorkspaceContext, req: ExpandRequest, hooks: ExpandHooks | None = None) -> ExpandOutcome:
    """Plan (or resume) an expand job and run it; see the module docstring."""
    t0 = time.monotonic()
    hooks = hooks or ExpandHooks()
    store = ctx.store
    if req.resume:
        job = store.get_job(req.resume)
        if job.kind != "expand":
            raise ConfigError(f"--resume {job.id}: that is a {job.kind} job, not an expand job")
        p = job.params
        asked = {"generation": req.generation, "tasks": req.tasks, "strategy": req.strategy, "seed": req.seed,
                 "attempts": req.attempts, "unit": req.unit, "proposals": req.proposals, "fewshot": req.fewshot,
                 "explore": req.explore}
        defaults = ExpandRequest()
        # jobs from before few-shot search ran without it, and from before repeated exploration with one look
        ran = {**p, "fewshot": p.get("fewshot", 0), "explore": p.get("explore", 1)}
        # a setting the user gave (not the default) that differs from the job's is refused, never ignored
        changed = [k for k, v in asked.items() if v is not None and v != getattr(defaults, k) and v != ran.get(k)]
        if changed:
            raise ConfigError(f"--resume {job.id}: the job ran with other settings ({', '.join(changed)}); "
                              "start a new expand instead")
        src = p.get("sources") or {"replays": 0, "hints": []}  # jobs from before the sources ran none
        req = ExpandRequest(**{**req.__dict__, **{k: p[k] for k in ("tasks", "strategy", "seed", "attempts",
                                                                     "unit", "proposals", "round_size")},
                               "fewshot": p.get("fewshot", 0), "explore": p.get("explore", 1),
                               "baseline_per_template": p.get("baseline_per_template"),
                               "search": p.get("search", True),
                               "sources": SourcesPlan(replays=src["replays"], hints=tuple(src["hints"]),
                                                      hint_attempts=src.get("hint_attempts", 1),
                                                      hint_tasks=src.get("hint_tasks"),
                                                      replay_style=src.get("replay_style", "plain"))})
        gen = ctx.generation(p["generation"])
    else:
        gen = ctx.generation(req.generation)
    _check(req)
    base = resolve_arms(ctx, "harness", [gen.id], [])[0]
    assert base.config is not None and base.arm.config_digest is not None
    manual = manual_patches(req.candidates, base.config, ctx.contract)
    tasks = pool_tasks(ctx, req.tasks)
    if not tasks:
        raise InputError("--tasks", None, f"no train tasks in {ctx.ws.tasks_dir}" + (
            f" match '{req.tasks}'" if req.tasks else ""))
    check_verifiers_offline(tasks, ctx.contract)  # refused before the expand job exists (exec/verifier_offline.py)
    if req.resume:
        job = store.get_job(req.resume)
        if job.params.get("tasks_fingerprint") != tasks_fingerprint(tasks):
            raise ConfigError(f"--resume {job.id}: the train tasks differ from the job's (added, removed or "
                              "edited); start a new expand instead")
        if job.params.get("config_digest") != base.arm.config_digest:
            raise ConfigError(f"--resume {job.id}: generation {gen.id} now runs another config")
        if req.candidates and manual != job.params.get("candidates", []):
            raise ConfigError(f"--resume {job.id}: the job ran with other settings (candidates); "
                              "start a new expand instead")
        manual = list(job.params.get("candidates", []))
        job_id = job.id
        old = store.get_budget(job_id)
        limit = req.budget if req.budget is not None else (old.limit if old else 60.0)
    else:
        job_id = new_job_id().replace("job-", "exp-")
        limit = req.budget if req.budget is not None else 60.0
    everything = Pool(tasks=tasks, base_digest=base.arm.config_digest)  # the sources' pool
    pool = Pool(tasks=sample_per_template(ctx, gen.id, base.arm.config_digest, tasks, req.baseline_per_template),
                base_digest=base.arm.config_digest)
    spent = 0.0
    if req.resume:  # what the job's children recorded so far counts against the limit
        spent = sum(row_cost(req.unit, t) for j in store.child_jobs(job_id) for t in store.trials(j.id))
    pre = preflight(ctx, gen.id, pool, req.attempts, req.unit, limit, spent,
                    searching=req.search and _searching(base.config, manual, req.proposals + req.fewshot))
    hooks.message(pre.describe())
    if not req.resume and limit < pre.baseline_cost:
        raise InputError("--budget", None, f"{limit:g} {req.unit} cannot cover the baseline "
                                           f"({pre.baseline_cost:.6g} {req.unit}); the minimum that works is "
                                           f"{math.ceil(pre.baseline_cost)}")

    store.acquire_driver()
    try:
        if not req.resume:
            store.create_job(job_id, agent="harness", generation=gen.id, harness_config_digest=base.arm.config_digest,
                             attempts=req.attempts, concurrency=req.concurrency,
                             task_paths=[t.path for t in tasks], tasks_fingerprint=tasks_fingerprint(tasks),
                             trials=[], kind="expand", phase="expand",
                             params=_params(req, gen.id, tasks, base.arm.config_digest, manual))
        store.claim_job(job_id)
        runner = ChildJobs(ctx, job_id, phase="expand", budget=limit, unit=req.unit, concurrency=req.concurrency,
                           progress_for=hooks.stage, resume_hint=f"resume with `rsi expand --resume {job_id}`",
                           provider=req.provider, trial_env_hook=req.trial_env_hook)
        run = _Run(ctx, job_id, req, gen.id, base, pool, runner, hooks, limit, pre.per_trial, pre.per_control,
                   manual=manual, everything=everything)
        stop = _with_model(run)
        store.set_budget_figures(job_id, req.unit, limit, runner.spent_by_part())
        out = build_outcome(ctx, job_id, gen, base, pool, runner, pre, stop, time.monotonic() - t0,
                            complete=stop is None or run.searched_out)
        out.sources = sources_summary(ctx, gen.id, everything).as_json()
        if stop is None or run.searched_out:  # a search that spent the budget is done (`--resume` adds more)
            store.finish_job(job_id, "done")
        else:
            store.mark_job_interrupted(job_id, stop)
        return out
    except BaseException:
        if store.get_job(job_id).status == "running":
            store.mark_job_interrupted(job_id, "the run ended unexpectedly")
        raise
    finally:
        store.release_driver()


def _with_model(run: _Run) -> str | None:
    """Run the steps with the model endpoint up for the whole job (children and the proposer share it)."""
    cfg = run.base.config
    assert cfg is not None
    from rsi.models.embedded import ensure_server

    run.ctx.ws.logs_dir.mkdir(parents=True, exist_ok=True)
    log = run.ctx.ws.logs_dir / "model-server.log"
    with contextlib.ExitStack() as stack:
        url, _ = stack.enter_context(ensure_server(cfg.model.endpoint, log_path=log))
        if run.req.reflector is None and run.req.proposals > 0:
            s = run.ctx.settings.expand.proposer  # a configured proposer endpoint, else the generation's model
            if s is None:
                run.req.reflector = ModelReflector(base_url=url, model=run.base.generation.serve_name())
            else:
                purl = url if s.endpoint == cfg.model.endpoint else stack.enter_context(
                    ensure_server(s.endpoint, log_path=log))[0]
                run.req.reflector = ModelReflector(
                    base_url=purl, model=s.model or run.base.generation.serve_name(),
                    api_key=os.environ.get(s.api_key_env) if s.api_key_env else None,
                    temperature=s.temperature, max_tokens=s.max_tokens)
        return _steps(run)


def _sync(run: _Run) -> None:
    run.ctx.store.set_budget_figures(run.job_id, run.req.unit, run.limit, run.runner.spent_by_part())


def _steps(run: _Run) -> str | None:
    ctx, req, pool, gen_id = run.ctx, run.req, run.pool, run.gen_id
    dirs = [Path(t.path) for t in pool.tasks]
    # 2. baseline, reusing finished trials
    book = read_book(ctx, gen_id, pool)
    cells = [(t.name, run.base.arm.id, req.attempts - len(book.counted(BASELINE, t.name)))
             for t in pool.tasks]
    res = run.runner.run(Stage("baseline", [run.base], [c for c in cells if c[2] > 0], dirs, part="baseline"))
    _sync(run)
    if res.stop:
        return res.stop
    # 3. attribution controls on failed tasks
    failed = _failed(run)
    res = _controls(run, "attribution", failed, _control_cap(run))
    _sync(run)
    found = verdicts(read_book(ctx, gen_id, pool), pool, ctx.contract.attribution)
    record_verdicts(ctx, gen_id, pool, found)
    if res.stop:
        return res.stop
    # 3b. training-data sources: oracle replays of every train task, the hint ladder on the failed ones
    sampled = {t.name for t in pool.tasks}
    every = run.everything or pool
    # the hint ladder climbs from the baseline's failures, then the tasks the baseline did not run
    unmeasured = [t.name for t in every.tasks if t.name not in sampled]
    stop = run_sources(ctx, gen_id, run.base, every, run.runner, req.sources,
                       [t.name for t in failed] + unmeasured, _control_cap(run))
    _sync(run)
    if stop or not req.search:
        return stop
    # 4. candidates
    cfg = run.base.config
    assert cfg is not None
    manual_candidates(ctx, run.job_id, cfg, pool.base_digest, run.manual)
    search_space_candidates(ctx, run.job_id, cfg, pool.base_digest)
    fewshot_candidates(ctx, run.job_id, gen_id, cfg, pool.base_digest, pool.tasks, req.fewshot, req.seed)
    book = read_book(ctx, gen_id, pool)
    model_failed = [t for t in failed if found.get(t.name) is not None and found[t.name].kind == "model"]
    failures = []
    for t in model_failed:
        rows = [r for r in book.counted(BASELINE, t.name) if not r.passed]
        if rows:
            failures.append((rows[0], t.instruction))
    reflective_candidates(ctx, run.job_id, cfg, pool.base_digest, failures, req.proposals, req.reflector, req.seed)
    _plan(run, book)
    run.hooks.message(f"{len(run.plans)} candidate config(s): " + ", ".join(run.plans) if run.plans
                      else "no candidate configs (empty search_space, no usable proposal)")
    stop = _search(run, dirs)
    if stop is None:  # the search is done with budget left: the controls that waited for it
        res = _controls(run, "attribution-rest", failed, None)
        _sync(run)
        record_verdicts(ctx, gen_id, pool, verdicts(read_book(ctx, gen_id, pool), pool, ctx.contract.attribution))
        stop = res.stop
        run.searched_out = res.budget_out
    return stop


def _plan(run: _Run, book: Any) -> None:
    """Read the job's candidates back as arms (with the tasks each few-shot candidate must leave out)."""
    run.plans = candidate_plans(run.ctx, run.job_id, run.base.generation)
    run.pool.labels = {p.arm.config_digest or "": label for label, p in run.plans.items()}
    run.pool.held_out = demo_tasks(run.ctx, run.job_id,
                                   {r.id: r.task_name for rows in book.harness.values() for r in rows})


def _bootstrap_fewshot(run: _Run, book: Any) -> Any:
    """Draw the few-shot candidates the job could not draw before the search, now that candidates may have
    passed train tasks; returns the book to plan with (re-read when candidates were added)."""
    req, ctx = run.req, run.ctx
    if req.fewshot <= 0 or any(r.origin == FEWSHOT_ORIGIN for r in ctx.store.search_candidates(run.job_id)):
        return book  # none asked for, or drawn already (refused ones included: not drawn again)
    cfg = run.base.config
    assert cfg is not None
    also = [p.arm.config_digest for p in run.plans.values() if p.arm.config_digest]
    if not fewshot_candidates(ctx, run.job_id, run.gen_id, cfg, run.pool.base_digest, run.pool.tasks,
                              req.fewshot, req.seed, also=also):
        return book
    book = read_book(ctx, run.gen_id, run.pool)
    _plan(run, book)
    added = [label for label in run.plans if label.startswith(f"{FEWSHOT_ORIGIN}:")]
    if added:
        run.hooks.message(f"few-shot candidate(s) bootstrapped from passes found in the search: {', '.join(added)}")
    return book


def _failed(run: _Run) -> list[Task]:
    """Train tasks whose baseline trials (infra left out) all failed."""
    book = read_book(run.ctx, run.gen_id, run.pool)
    return [t for t in run.pool.tasks if book.counted(BASELINE, t.name)
            and not any(r.passed for r in book.counted(BASELINE, t.name))]


def _searching(cfg: Any, manual: list[dict[str, Any]], asked: int) -> bool:
    """Whether there are candidates to search: manual patches, a search_space, or proposals / few-shot
    demonstrations asked for (`asked`: their count)."""
    return cfg is not None and (bool(cfg.search_space or manual) or asked > 0)


def _control_cap(run: _Run) -> int | None:
    """Controls may take half of what the baseline left, so the search is not starved (None: no cap,
    as when the unit is tokens, which controls do not spend, or when there is nothing to search)."""
    left = run.runner.remaining()
    if left is None or run.req.unit == "tokens" or not run.req.search or not _searching(
            run.base.config, run.manual, run.req.proposals + run.req.fewshot):
        return None
    return max(0, int(left / 2 / max(run.per_control, 1e-9)))


def _controls(run: _Run, key: str, failed: list[Task], cap: int | None) -> Any:
    """Run the oracle/nop controls still missing on `failed` (at most `cap` runs) as child `key`."""
    book = read_book(run.ctx, run.gen_id, run.pool)
    gen = run.base.generation
    oracle = ArmPlan(Arm(agent="oracle", generation=run.gen_id), gen)
    nop = ArmPlan(Arm(agent="nop", generation=run.gen_id), gen)
    names = [t.name for t in failed]
    cells = plan_controls(names, {n: sum(not _infra(r) for r in book.oracle.get(n, [])) for n in names},
                          {n: sum(not _infra(r) for r in book.nop.get(n, [])) for n in names},
                          run.ctx.contract.attribution.oracle_reruns, cap)
    arm = {"oracle": oracle.arm.id, "nop": nop.arm.id}
    return run.runner.run(Stage(key, [oracle, nop], [(t, arm[a], n) for t, a, n in cells],
                                [Path(t.path) for t in failed], part="attribution"))


def _infra(row: Any) -> bool:
    from rsi.core.trial import is_infra

    return is_infra(row.error_type)


def _search(run: _Run, dirs: list[Any]) -> str | None:
    ctx, req, pool = run.ctx, run.req, run.pool
    r = 0
    while True:
        key = f"search-{r:03d}"
        existing = run.runner.child(key)
        if existing is None:
            book = read_book(ctx, run.gen_id, pool)
            if r > 0:
                book = _bootstrap_fewshot(run, book)
            found = verdicts(book, pool, ctx.contract.attribution)
            state = search_state(book, pool, found)
            left = run.runner.remaining()
            n = req.round_size or req.concurrency
            if left is not None and req.unit == "trials":
                n = min(n, int(left))
            if n <= 0:
                run.searched_out = r > 0  # final only if the search got to run at all
                return (f"budget spent ({run.limit:g} {req.unit}); "
                        f"continue with `rsi expand --resume {run.job_id} --budget N`")
            per = 1.0 if req.unit == "trials" else max(run.per_trial, 1e-9)
            trials_left = None if left is None else int(left / per)
            cells = next_cells(req.strategy, state, n, req.seed, r, trials_left, req.explore)
            if not cells:
                return None
            merged: dict[tuple[str, str], int] = {}
            for cand, task, a in cells:
                merged[(task, run.plans[cand].arm.id)] = merged.get((task, run.plans[cand].arm.id), 0) + a
            stage = Stage(key, list(run.plans.values()), [(t, arm, a) for (t, arm), a in merged.items()], dirs,
                          part="search", extra={"round": r})
        else:
            stage = Stage(key, [], [], dirs, part="search")
        res = run.runner.run(stage)
        _sync(run)
        book = read_book(ctx, run.gen_id, pool)
        record_verdicts(ctx, run.gen_id, pool, verdicts(book, pool, ctx.contract.attribution))
        for label in run.plans:
            solved = [t for t in pool.names if any(x.passed for x in book.counted(label, t))]
            ctx.store.update_search_candidate(run.job_id, label, solved=solved)
        if res.stop:
            run.searched_out = res.budget_out
            return res.stop
        r += 1


__all__ = ["ExpandHooks", "ExpandOutcome", "ExpandRequest", "Preflight", "expand", "pool_tasks"]
