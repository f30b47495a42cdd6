"""`rsi discover`: make tasks at the current generation's frontier and admit only valid ones.

One discover job runs four steps, each resumable, each recorded:
1. **generate** candidates (generators by name) into `.rsi/discover/<job>/<name>/task/`, with
   their known-wrong solutions beside the task (never inside it), and reject at once what fails a
   static check: the task does not load, asks more than the contract allows, has no known-wrong
   solution, or nearly repeats a pool task's instruction;
2. **gate**, in Docker, cheapest first: the oracle passes every one of the contract's runs (this
   also builds the environment), then doing nothing fails and every known-wrong solution fails;
3. **probe**: the current generation attempts each valid *train* candidate K times;
4. **admit** into `tasks/` the train candidates whose pass rate lies in the band, and every valid holdout
   candidate. The split is decided by the contract's `promotion.holdout_unit`: by template (the default) it is a
   function of the template id, so no held-out template has a train task; by family, of the family; by task, of
   the task's digest. Holdout candidates are admitted on validity alone, never by the parent's probe band, so
   the holdout also holds tasks the parent solves and a regression can show. A train template's draft in a
   held-out phrasing (the contract's `promotion.holdout_phrasings`) is an `in_skill` holdout task, and so is a
   held-out composition of trained operations (the compose generator's, when `promotion.in_skill` is
   `compositions`); another held-out template's is `unseen` (`holdout_part` in task.toml;
   rsi.core.discover.draft_placement). Train candidates
   above the band are dropped (recorded, not admitted): an easy task carries no signal for the loop, and
   `--reprobe` retires pool tasks that became easy.

Steps 2-3 run as child `run` jobs of the discover job (rsi.loop.run), so a killed discover resumes
without re-paying a finished trial; candidates are one row per (job, name), so none is duplicated.
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from rsi.core.arm import Arm
from rsi.core.discover import (
    REJECT_REASONS,
    TaskDraft,
    content_digest,
    contract_overreach,
    draft_placement,
    nearest_duplicate,
    render_task,
)
from rsi.core.errors import ConfigError, InputError, RsiError
from rsi.core.task import HoldoutPart, Task
from rsi.loop.arms import ArmPlan, resolve_arms
from rsi.loop.context import WorkspaceContext
from rsi.loop.discover.generators import GENERATORS, GeneratorError, GenRequest, PoolTask, Proposer, load_generators
from rsi.loop.discover.requests import holdout_requests, plain_requests, train_template_requests
from rsi.loop.discover.stages import (
    admit,
    awaits_probe,
    evaluate_by_template,
    evaluate_controls,
    evaluate_oracle,
    evaluate_probe,
    split_by_template,
)
from rsi.loop.hooks import DiscoverHooks
from rsi.loop.run import new_job_id
from rsi.loop.stages import ChildJobs, Stage
from rsi.sandbox.base import SandboxProvider
from rsi.store.files import load_pool, load_task
from rsi.store.tables import CandidateRow

PROCEDURAL = ("files", "text", "data", "logs", "pyfix", "pipeline", "shell")


@dataclass
class DiscoverRequest:
    n: int = 10
    generators: list[str] = field(default_factory=list)  # default: the six procedural families
    families: list[str] = field(default_factory=list)
    generation: str | None = None
    band: tuple[float, float] | None = None  # default: the contract's
    attempts: int | None = None  # probe attempts; default: the contract's
    budget: float | None = None  # trials, gate and probe together
    resume: str | None = None
    holdout_only: bool = False
    # which holdout part a holdout-only job tops up: `unseen` templates, or `in_skill` (train templates in
    # their held-out phrasings)
    part: HoldoutPart = "unseen"
    difficulty: int | None = None  # default: the family's curriculum level
    levels: list[int] = field(default_factory=list)  # several levels, taken in turn (instead of difficulty)
    seed: int | None = None  # default: above every earlier discover / cycle seed here (next_seed)
    # the cycle the job draws for (`rsi cycle` passes its number; a plain discover is cycle 0): with the side, it
    # keys the stream each instance is drawn from (rsi.core.discover.instance_seed)
    cycle: int = 0
    concurrency: int = 2
    # Who attempts valid candidates: the generation's harness (a scripted agent in unit tests).
    probe_agent: str = "harness"
    # At most this many valid train candidates of one template are probed per job; the others of that template
    # are placed in the band by their probed siblings' pooled rate (the model's reach is a property of the
    # template far more than of its names and data). None: every candidate is probed.
    probe_per_template: int | None = None
    # aim the requests at the train templates in turn (n candidates spread evenly over them, train phrasings)
    # instead of drawing templates at random, so none is spent on a template the split holds out
    train_templates: bool = False
    # a holdout-only job aims at these templates only, in turn (default: those the split gives its part)
    templates: list[str] = field(default_factory=list)


@dataclass
class DiscoverOutcome:
    job_id: str
    candidates: list[CandidateRow]
    interrupted: bool = False
    reason: str | None = None
    plan: dict[str, int] = field(default_factory=dict)
    wall_sec: float = 0.0


MAX_KNOWN_WRONG = 3  # the budget check assumes this many known-wrong answers of a candidate not generated yet

# The settings a discover job is planned with; a resume may not change them (only --budget, -n).
SETTINGS = ("n", "generators", "families", "generation", "band", "attempts", "holdout_only", "part", "difficulty",
            "levels", "seed", "cycle", "probe_agent", "probe_per_template", "train_templates", "templates")


def _settings(req: DiscoverRequest) -> dict[str, Any]:
    """What the user asked for explicitly (unset options left out)."""
    asked = {"n": req.n, "generators": req.generators, "families": req.families, "generation": req.generation,
             "band": list(req.band) if req.band else None, "attempts": req.attempts,
             "holdout_only": req.holdout_only, "part": req.part, "difficulty": req.difficulty, "levels": req.levels,
             "seed": req.seed, "cycle": req.cycle, "probe_agent": req.probe_agent,
             "probe_per_template": req.probe_per_template, "train_templates": req.train_templates,
             "templates": req.templates}
    defaults = DiscoverRequest()
    return {k: v for k, v in asked.items() if v not in (None, [], False) and v != getattr(defaults, k, None)}


def next_seed(store: Any) -> int:
    """A base seed above every earlier discover or cycle job's in this workspace: the same seed draws the
    same candidates, which a second run would find already taken (refused `name_taken`) and waste."""
    seeds = [int(j.params.get("seed") or 0) for kind in ("discover", "cycle") for j in store.jobs_of(kind=kind)]
    return max(seeds) + 1 if seeds else 0


def _resolve(ctx: WorkspaceContext, req: DiscoverRequest) -> tuple[DiscoverRequest, str, dict[str, Any]]:
    """Check a request (or a resume against its job's settings); return it with every setting filled,
    the job id and the settings to record."""
    contract = ctx.contract
    if req.n < 1:
        raise InputError("--n", None, "must be at least 1")
    if req.budget is not None and req.budget <= 0:
        raise InputError("--budget", None, "must be more than 0")
    if req.concurrency < 1:
        raise InputError("--concurrency", None, "must be at least 1")
    if req.part != "unseen" and not req.holdout_only:
        raise InputError("--part", None, "names the holdout part a --holdout-only job tops up; add --holdout-only")
    if req.resume:
        job = ctx.store.get_job(req.resume)
        if job.kind != "discover":
            raise ConfigError(f"--resume {job.id}: that is a {job.kind} job, not a discover job")
        stored = job.params
        changed = [k for k, v in _settings(req).items() if k in stored and stored[k] != v]
        if changed:
            raise ConfigError(f"--resume {job.id}: the job was planned with other settings ({', '.join(changed)}); "
                              "resume without them, or start a new discover")
        filled = DiscoverRequest(**{**req.__dict__, **{k: stored[k] for k in SETTINGS if k in stored}})
        filled.band = (float(stored["band"][0]), float(stored["band"][1]))
        filled.generators = filled.generators or list(PROCEDURAL)
        return filled, job.id, stored
    gens = req.generators or list(PROCEDURAL)
    for g in gens:
        GENERATORS.get(g)  # an unknown name lists the known ones
    band = req.band or contract.discovery.band
    if not 0 <= band[0] <= band[1] <= 1:
        raise InputError("--band", None, f"{band[0]:g},{band[1]:g} is not LO,HI with 0 <= LO <= HI <= 1")
    attempts = req.attempts or contract.discovery.probe_attempts
    if attempts < 1:
        raise InputError("--attempts", None, "must be at least 1")
    if req.difficulty is not None and not 1 <= req.difficulty <= contract.discovery.max_difficulty:
        raise InputError("--difficulty", None, f"must lie in 1..{contract.discovery.max_difficulty}")
    for lv in req.levels:
        if not 1 <= lv <= contract.discovery.max_difficulty:
            raise InputError("--level", None, f"{lv} does not lie in 1..{contract.discovery.max_difficulty}")
    seed = req.seed if req.seed is not None else next_seed(ctx.store)
    filled = DiscoverRequest(**{**req.__dict__, "generators": gens, "band": band, "attempts": attempts,
                                "generation": ctx.generation(req.generation).id, "seed": seed})
    params = {k: getattr(filled, k) for k in SETTINGS}
    params["band"] = list(band)
    return filled, new_job_id().replace("job-", "disc-"), params


def discover(ctx: WorkspaceContext, req: DiscoverRequest, hooks: DiscoverHooks | None = None, *,
             provider: SandboxProvider | None = None) -> DiscoverOutcome:
    """Plan (or resume) a discover job and run its steps; see the module docstring."""
    import time

    t0 = time.monotonic()
    hooks = hooks or DiscoverHooks()
    load_generators()
    store = ctx.store
    req, job_id, params = _resolve(ctx, req)
    gen = ctx.generation(req.generation)
    gens, band, attempts = req.generators, req.band, int(req.attempts or 1)
    assert band is not None

    if req.probe_agent == "harness":
        probe_arms = resolve_arms(ctx, "harness", [gen.id], [])  # refuses a generation without a runnable config
    else:
        probe_arms = [ArmPlan(Arm(agent=req.probe_agent, generation=gen.id), gen)]
    store.acquire_driver()
    try:
        if not req.resume:
            store.create_job(job_id, agent="harness", generation=gen.id,
                             harness_config_digest=probe_arms[0].arm.config_digest, attempts=attempts,
                             concurrency=req.concurrency, task_paths=[], tasks_fingerprint="", trials=[],
                             kind="discover", phase="discover", params=params)
        store.claim_job(job_id)
        stage_root = ctx.ws.state_dir / "discover" / job_id
        pool = _pool(ctx)
        hooks.message(f"discover {job_id}: generation {gen.id}, band {band[0]:g}..{band[1]:g}, "
                      f"{attempts} probe attempt(s), generators {', '.join(gens)}")
        capped = _generate(ctx, job_id, req, gens, gen.id, stage_root, pool, hooks)

        runner = ChildJobs(ctx, job_id, phase="discover", budget=req.budget, concurrency=req.concurrency,
                           progress_for=hooks.stage, resume_hint=f"resume with `rsi discover --resume {job_id}`",
                           task_state="candidate", provider=provider)
        open_ = store.candidates(job_id, "generated")
        checked = store.candidates(job_id, "checked")
        n_wrong = sum(len(_wrong_names(Path(c.stage_dir))) for c in open_ + checked)
        n_valid = len([c for c in store.candidates(job_id, "valid") if awaits_probe(c)])
        n_train = len([c for c in open_ + checked if c.split != "holdout"])
        plan = {"oracle": len(open_) * ctx.contract.discovery.oracle_runs, "controls": len(open_ + checked) + n_wrong,
                "probe": (n_train + n_valid) * attempts}
        hooks.message(f"plan: {len(store.candidates(job_id))} candidate(s); up to {sum(plan.values())} trials "
                      f"(oracle {plan['oracle']}, nop + known-wrong {plan['controls']}, probe {plan['probe']})"
                      + (f"; budget {req.budget:g} trials" if req.budget is not None else ""))

        stop = _gate_and_probe(ctx, job_id, runner, gen.id, probe_arms, band, attempts,
                               req.probe_per_template) or capped
        # Every candidate whose probe is complete is admitted, also when the job stops early (a budget,
        # an infra failure): its evidence is whole; the undecided ones wait for --resume.
        admit(ctx, job_id)
        if stop is None:
            store.finish_job(job_id, "done")
        else:
            store.mark_job_interrupted(job_id, stop)
        return DiscoverOutcome(job_id=job_id, candidates=store.candidates(job_id), interrupted=stop is not None,
                               reason=stop, plan=plan, wall_sec=time.monotonic() - t0)
    except BaseException:
        if any(j.id == job_id and j.status == "running" for j in store.list_jobs(limit=1000)) \
                and job_id in store.live_job_ids():
            store.mark_job_interrupted(job_id, "the run ended unexpectedly")
        raise
    finally:
        store.release_driver()


# -- generate ------------------------------------------------------------------------------------


def _pool(ctx: WorkspaceContext) -> list[Task]:
    """The workspace's task pool (retired tasks left out)."""
    retired = {r.digest for r in ctx.store.task_rows(state="retired")}
    return [t for t in load_pool(ctx.ws.tasks_dir) if t.digest not in retired]


def _pool_view(ctx: WorkspaceContext, pool: list[Task]) -> list[PoolTask]:
    """Train tasks as generators may see them: holdout outcomes are sealed from discovery."""
    rows = {r.digest: r for r in ctx.store.task_rows()}
    out = []
    for t in pool:
        if t.split != "train":
            continue
        row, meta = rows.get(t.digest), t.spec.metadata.rsi
        test = Path(t.path, "tests", "test.sh")
        solve = Path(t.path, "solution", "solve.sh")
        out.append(PoolTask(name=t.name, family=t.family, difficulty=meta.difficulty, instruction=t.instruction,
                            generator=meta.generator, seed=meta.seed,
                            probe_pass_rate=row.probe_pass_rate if row else None,
                            test_sh=test.read_text() if test.is_file() else "",
                            solve_sh=solve.read_text() if solve.is_file() else ""))
    return out


@contextmanager
def _proposer(ctx: WorkspaceContext, gen_id: str) -> Iterator[Proposer]:
    """The configured proposer, else the generation's own model on its endpoint; the embedded server
    is started for the block if that is what it names, with the generation's adapters loaded."""
    import os

    from rsi.models.adapters import ensure_adapters
    from rsi.models.embedded import ensure_server

    s = ctx.settings.discover.proposer
    g = ctx.generation(gen_id)
    endpoint = s.endpoint if s is not None else ctx.harness_config_for(g).model.endpoint
    ctx.ws.logs_dir.mkdir(parents=True, exist_ok=True)
    with ensure_server(endpoint, log_path=ctx.ws.logs_dir / "model-server.log") as (url, _started):
        if s is not None:
            yield Proposer(base_url=url, model=s.model or g.serve_name(),
                           api_key=os.environ.get(s.api_key_env) if s.api_key_env else None,
                           temperature=s.temperature, max_tokens=s.max_tokens)
            return
        ensure_adapters(url, [g], ctx.ws.root)
        yield Proposer(base_url=url, model=g.serve_name())


def _generate(ctx: WorkspaceContext, job_id: str, req: DiscoverRequest, gens: list[str], gen_id: str,
              stage_root: Path, pool: list[Task], hooks: DiscoverHooks) -> str | None:
    """Generate and statically check candidates up to `req.n` or what the budget covers (then say why)."""
    store, contract = ctx.store, ctx.contract
    levels = {f: r.level for f, r in store.curriculum().items()}
    view = _pool_view(ctx, pool)
    known = {t.name: t.instruction for t in pool}
    digests = {t.digest for t in pool}
    for c in store.candidates(job_id):
        if c.state != "rejected":
            known[c.name] = Path(c.stage_dir, "task", "instruction.md").read_text() \
                if Path(c.stage_dir, "task", "instruction.md").is_file() else ""
    wanted = req.n
    rows = store.candidates(job_id)
    done_keys = {(c.generator, c.seed) for c in rows}
    # holdout-only counts holdout candidates; the request list is bounded, so a failing generator ends
    have = len([c for c in rows if not req.holdout_only or c.split == "holdout"])
    # A budget caps how many candidates enter the gate: each must be able to finish it (oracle runs, nop,
    # its known-wrong answers, the probes of a train candidate), or the stages spend the budget on candidates
    # never probed. Before a draft exists its split is unknown, so the check assumes it is probed.
    probes = int(req.attempts or 1)
    fixed = contract.discovery.oracle_runs + 1 + probes
    planned = sum(_cost(c, fixed, probes) for c in rows if c.state != "rejected")
    unit, held = contract.promotion.holdout_unit, contract.promotion.holdout_phrasings
    requests = plain_requests(req, gens, levels, contract.discovery.max_difficulty, held)
    if req.train_templates and not req.holdout_only:
        aimed_train = train_template_requests(req, gens, levels, contract.discovery.max_difficulty, unit,
                                              contract.promotion.holdout_fraction, held)
        requests = requests if aimed_train is None else aimed_train
    if req.holdout_only:
        # what the part had before this job (its own admissions left out, so a resume asks the same)
        mine = {r.digest for r in store.task_rows() if r.discover_job == job_id}
        covered = {t.spec.metadata.rsi.template or "" for t in pool if t.split == "holdout" and t.digest not in mine
                   and (t.spec.metadata.rsi.holdout_part or "unseen") == req.part}
        aimed = holdout_requests(req, gens, levels, contract.discovery.max_difficulty, unit,
                                 contract.promotion.holdout_fraction, covered, held)
        if aimed == []:
            hooks.message(f"no {req.part} holdout {unit} at the levels asked for: nothing to generate")
        requests = requests if aimed is None else aimed
    with ExitStack() as stack:
        proposer = stack.enter_context(_proposer(ctx, gen_id)) if "model" in gens else None
        for gname, greq in requests:
            if have >= wanted:
                break
            if req.budget is not None and planned + fixed + MAX_KNOWN_WRONG > req.budget:
                why = (f"budget spent: {req.budget:g} trials cover {have} of the {wanted} candidate(s) (about "
                       f"{fixed + MAX_KNOWN_WRONG} trials each through the gate and the probe)")
                hooks.message(why)
                return why
            if (gname, greq.seed) in done_keys:
                continue
            greq.pool, greq.proposer = view, proposer
            row = _candidate(ctx, job_id, gname, greq, gen_id, stage_root, known, digests,
                             req.part if req.holdout_only else None)
            if row is None:
                continue
            have += int(not req.holdout_only or row.split == "holdout")
            if row.state != "rejected":
                known[row.name] = Path(row.stage_dir, "task", "instruction.md").read_text()
                planned += _cost(row, fixed, probes)
            hooks.generated(row, have, wanted)
    return None


def _cost(c: CandidateRow, fixed: int, probes: int) -> int:
    """Trials a candidate takes through the gate and (a train one) the probe."""
    return fixed - (probes if c.split == "holdout" else 0) + len(_wrong_names(Path(c.stage_dir)))


def _reject(ctx: WorkspaceContext, row: CandidateRow, reason: str, detail: str) -> CandidateRow:
    assert reason in REJECT_REASONS
    row.state, row.reason, row.detail = "rejected", reason, detail[:2000]
    return ctx.store.add_candidate(row)


def _candidate(ctx: WorkspaceContext, job_id: str, gname: str, greq: GenRequest, gen_id: str, stage_root: Path,
               known: dict[str, str], digests: set[str], only: HoldoutPart | None) -> CandidateRow | None:
    """Generate, stage and statically check one candidate; None when it is skipped (a holdout-only job keeps
    the drafts of its holdout part `only`)."""
    contract = ctx.contract
    base = CandidateRow(job_id=job_id, name=f"{gname}-s{greq.seed}", generator=gname,
                        family=greq.family or "misc", difficulty=greq.difficulty, seed=greq.seed,
                        stage_dir=str(stage_root / f"{gname}-s{greq.seed}"), state="generated")
    existing = {c.name for c in ctx.store.candidates(job_id)}
    try:
        draft = GENERATORS.create(gname).generate(greq)
    except GeneratorError as e:
        return _reject(ctx, base, e.reason, str(e))
    except Exception as e:  # noqa: BLE001 - a broken generator is a rejected candidate, never a crash
        return _reject(ctx, base, "generator_error", f"{type(e).__name__}: {e}")
    name = draft.name()
    if name in existing:  # another seed made the very same task (mutate picks parents by seed)
        return None
    p = contract.promotion
    split, part = draft_placement(draft, name, p.holdout_fraction, p.holdout_unit, p.holdout_phrasings, p.in_skill)
    if only is not None and (split != "holdout" or part != only):
        return None
    files = render_task(draft, name=name, split=split, discovered_by=gen_id, holdout_part=part)
    stage = stage_root / name
    _write_stage(stage, files, draft)
    row = CandidateRow(job_id=job_id, name=name, generator=gname, family=draft.family, difficulty=draft.difficulty,
                       seed=draft.seed, parent_task=draft.parent_task, split=split, stage_dir=str(stage),
                       state="generated", task_digest=content_digest(files))
    try:
        task = load_task(stage / "task")
    except RsiError as e:
        return _reject(ctx, row, "invalid_task", str(e))
    row.task_digest = task.digest
    over = contract_overreach(task.spec, contract)
    if over:
        return _reject(ctx, row, "over_contract", "; ".join(over))
    if not draft.known_wrong:
        return _reject(ctx, row, "no_known_wrong", "the generator wrote no known-wrong solution")
    if task.digest in digests:
        return _reject(ctx, row, "duplicate_digest", f"digest {task.digest[:12]} is already in the pool")
    if (ctx.ws.tasks_dir / name).exists():
        return _reject(ctx, row, "name_taken", f"{ctx.ws.tasks_dir / name} exists with other content")
    near = nearest_duplicate(task.instruction, {k: v for k, v in known.items() if k != name})
    if near is not None and near[1] >= contract.discovery.near_duplicate_threshold:
        return _reject(ctx, row, "near_duplicate", f"{near[1]:.2f} similar to {near[0]} (threshold "
                       f"{contract.discovery.near_duplicate_threshold:g})")
    digests.add(task.digest)
    return ctx.store.add_candidate(row)


def _write_stage(stage: Path, files: dict[str, str], draft: TaskDraft) -> None:
    """`<stage>/task/...` and `<stage>/known_wrong/<k>/solve.sh`, replaced whole."""
    tmp = stage.with_name(stage.name + ".tmp")
    shutil.rmtree(tmp, ignore_errors=True)
    for rel, text in files.items():
        p = tmp / "task" / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        if rel.endswith(".sh"):
            p.chmod(0o755)
    for k, body in enumerate(draft.known_wrong, 1):
        p = tmp / "known_wrong" / str(k) / "solve.sh"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(body)
        p.chmod(0o755)
    shutil.rmtree(stage, ignore_errors=True)
    tmp.rename(stage)


def _wrong_names(stage: Path) -> list[str]:
    d = stage / "known_wrong"
    return sorted((p.name for p in d.iterdir() if (p / "solve.sh").is_file()), key=int) if d.is_dir() else []


# -- gate, probe, admit ----------------------------------------------------------------------------


def _gate_and_probe(ctx: WorkspaceContext, job_id: str, runner: ChildJobs, gen_id: str,
                    probe_arms: list[ArmPlan], band: tuple[float, float], attempts: int,
                    per_template: int | None = None) -> str | None:
    """Run the oracle stage, the controls stage and the probe; return why it stopped, or None."""
    store, gen = ctx.store, ctx.generation(gen_id)
    oracle = ArmPlan(Arm(agent="oracle", generation=gen_id), gen)
    nop = ArmPlan(Arm(agent="nop", generation=gen_id), gen)

    open_ = store.candidates(job_id, "generated")
    if open_:
        cells = [(c.name, oracle.arm.id, ctx.contract.discovery.oracle_runs) for c in open_]
        res = runner.run(Stage(_stage_key(runner, "oracle", open_), [oracle], cells, _dirs(open_)))
        evaluate_oracle(ctx, job_id, open_, res)
        if res.stop:
            return res.stop

    passed = store.candidates(job_id, "checked")
    if passed:
        arms = [nop]
        cells = []
        for c in passed:
            cells.append((c.name, nop.arm.id, 1))
            for k in _wrong_names(Path(c.stage_dir)):
                plan = ArmPlan(Arm(agent="known_wrong", generation=gen_id, variant=k), gen)
                if plan.arm.id not in {a.arm.id for a in arms}:
                    arms.append(plan)
                cells.append((c.name, plan.arm.id, 1))
        res = runner.run(Stage(_stage_key(runner, "controls", passed), arms, cells, _dirs(passed)))
        evaluate_controls(ctx, job_id, passed, res)
        if res.stop:
            return res.stop

    valid = [c for c in store.candidates(job_id, "valid") if awaits_probe(c)]
    probed, by_sibling = split_by_template(valid, per_template)
    if probed:
        cells = [(c.name, probe_arms[0].arm.id, attempts) for c in probed]
        res = runner.run(Stage(_stage_key(runner, "probe", probed), probe_arms, cells, _dirs(probed)))
        evaluate_probe(ctx, job_id, probed, res, band)
        if res.stop:
            return res.stop
    if by_sibling:  # the template's probed candidates (this job's, any round) stand for the rest of it
        trials = [t for j in runner.children() if j.params.get("stage", "").startswith("probe")
                  for t in ctx.store.trials(j.id)]
        evaluate_by_template(ctx, job_id, by_sibling, trials, band)
    left = [c for c in store.candidates(job_id) if c.state in ("generated", "checked") or awaits_probe(c)]
    if left:
        return (f"{len(left)} candidate(s) still undecided after infra failures; "
                f"resume with `rsi discover --resume {job_id}`")
    return None


def _stage_key(runner: ChildJobs, base: str, cands: list[CandidateRow]) -> str:
    """The stage's child-job key: `base` for the first round; a resume that generated more candidates after
    that round finished runs them as `base.2`, `base.3`, ... (a finished child job takes no new cells)."""
    names = {c.name for c in cands}
    for i in range(1, 1000):
        key = base if i == 1 else f"{base}.{i}"
        child = runner.child(key)
        if child is None or names <= {t.task_name for t in runner.ctx.store.trials(child.id)}:
            return key
    raise ConfigError(f"discover {runner.parent}: too many {base} rounds")


def _dirs(cands: list[CandidateRow]) -> list[Path]:
    return [Path(c.stage_dir) / "task" for c in cands]


__all__ = ["DiscoverHooks", "DiscoverOutcome", "DiscoverRequest", "discover"]
