"""Update (`rsi update`): accepted trajectories -> training backend -> new LoRA revision -> candidate.

1. **serving config**: the config `rsi expand` adopted for the generation (newest expand job, or the
   one named with --from-job), else the generation's own config. The candidate is served with it.
2. **trials**: the generation's harness trials as `update` may read them (holdout sealed in SQL),
   from the named jobs and their child jobs when --from-job is given; each must have run under the
   serving config (rsi.loop.update.data.ConfigGate) or it is refused with the reason.
3. **selection** (rsi.core.training.select: acceptance, per-template cap, validation slice) + **replay**
   of earlier generations (rsi.loop.update.replay) -> **dataset** (rsi.train.dataset) -> **backend**, with
   the KL coefficient resolved against the contract (`training.kl_coef` is a floor).
4. **candidate**: the adapter is checked (rsi.train.peft_dir), copied to
   `adapters/<lineage>/g<N>-<sha8>/`, loaded into the running endpoint under its new serve name
   `<lineage>-g<N>-<sha8>` (when one runs), and only then is the candidate generation registered (DB +
   `generations/gen-NNNN.yaml`). A backend that fails, an adapter that fails its check or that the
   endpoint refuses: the run is recorded as failed and no candidate is left behind.
"""

from __future__ import annotations

import secrets
import shutil
import time
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rsi.core.errors import ConfigError, InputError, RsiError
from rsi.core.generation import AdapterRef, GenerationManifest, GenerationState, HarnessRef, Provenance, generation_id
from rsi.core.harness_config import HarnessConfig
from rsi.core.training import OBJECTIVES, TrainSettings, select
from rsi.loop.context import WorkspaceContext
from rsi.loop.suites import suite_digests
from rsi.loop.update.data import ConfigGate, LoadedTrial, dataset_line, load_trial
from rsi.loop.update.leakage import check_leakage
from rsi.loop.update.replay import gather_replay, task_templates
from rsi.store.files import load_pool, write_yaml_model
from rsi.train.backends import BACKENDS
from rsi.train.base import Log, Progress, TrainError, TrainRequest, TrainResult
from rsi.train.dataset import sample_counts, write_dataset
from rsi.train.peft_dir import AdapterCheckError, AdapterInfo, check_peft_dir

# the agents whose trials may train (DESIGN §12): the model's own rollouts, its hinted rollouts, oracle replays
SOURCE_AGENTS = ("harness", "hinted", "oracle-replay")


class UpdateFailed(RsiError):
    exit_code = 1


@dataclass
class UpdateRequest:
    gen: str | None = None
    backend: str = "local"
    from_jobs: list[str] = field(default_factory=list)
    objective: str = "sft+pg"
    out: Path | None = None
    command: str | None = None
    steps: int | None = None
    init: str | None = None  # `parent` | `base` (default: rsi.yaml `train.init`)
    load: bool = True  # load the adapter into the running endpoint
    dry_run: bool = False  # select, check leakage and count samples; write and train nothing
    # Mixture-of-LoRA (rsi.loop.update.mol): register a new specialist LABEL for these new families
    add_specialist: str | None = None
    domains: list[str] = field(default_factory=list)
    log: Log = lambda _m: None  # noqa: E731
    progress: Progress | None = None


@dataclass
class UpdateOutcome:
    run_id: str
    generation: str
    backend: str
    objective: str
    config: dict[str, Any]
    dataset: dict[str, Any]
    selection: dict[str, Any]
    refused: dict[str, int]
    replay: dict[str, Any] = field(default_factory=dict)
    candidate: str | None = None
    adapter: dict[str, Any] | None = None
    training: dict[str, Any] = field(default_factory=dict)
    loaded: dict[str, Any] = field(default_factory=dict)
    manifest_path: str | None = None
    wall_sec: float = 0.0

    def as_json(self) -> dict[str, Any]:
        return asdict(self)


def serving_config(ctx: WorkspaceContext, gen: GenerationManifest,
                   from_jobs: list[str]) -> tuple[HarnessConfig, str, str]:
    """(config, digest, where it came from): the adopted config of the newest expand job, else the generation's."""
    store = ctx.store
    expands = [j for j in store.jobs_of(kind="expand", generation=gen.id) if not from_jobs or j.id in from_jobs]
    by_name: dict[str, list[Any]] = {}
    for row in store.list_configs():
        by_name.setdefault(row.name, []).append(row)
    for job in reversed(expands):
        name = f"{gen.harness_config.name}-{job.id.split('-')[-1]}"
        rows = by_name.get(name)
        if rows:
            digest = rows[-1].digest
            return ctx.config_by_digest(digest), digest, f"adopted by expand job {job.id}"
    return ctx.harness_config_for(gen), gen.harness_config.digest, f"{gen.id}'s own config (no adopted config)"


def _job_ids(ctx: WorkspaceContext, from_jobs: list[str]) -> set[str] | None:
    if not from_jobs:
        return None
    for j in from_jobs:
        ctx.store.get_job(j)  # NotFoundError names it
    ids, frontier = set(from_jobs), list(from_jobs)
    while frontier:
        children = [c.id for c in ctx.store.jobs_of(parents=frontier)]
        frontier = [c for c in children if c not in ids]
        ids.update(frontier)
    return ids


def next_generation_id(ctx: WorkspaceContext) -> str:
    nums = [int(g.id.split("-")[-1]) for g in ctx.store.list_generations() if g.id.split("-")[-1].isdigit()]
    return generation_id(max(nums, default=-1) + 1)


def _base_model_dir(ctx: WorkspaceContext) -> Path:
    from rsi.models.embedded import DEFAULT_MODEL_ID
    from rsi.models.server.model_files import resolve_model

    spec = ctx.settings.base_model
    return resolve_model(None if spec == DEFAULT_MODEL_ID else spec)[0]


def _load_into_endpoint(ctx: WorkspaceContext, cfg: HarnessConfig, m: GenerationManifest) -> dict[str, Any]:
    """Load the candidate's adapter into the endpoint if one answers; a refusal is an error."""
    from rsi.models.adapters import ensure_adapters
    from rsi.models.client import ChatClient, ModelRequestError
    from rsi.models.embedded import resolve_endpoint

    url = resolve_endpoint(cfg.model.endpoint)
    with ChatClient(url, max_attempts=1) as probe:
        if not probe.healthy():
            return {"loaded": False, "endpoint": url,
                    "note": "no server answers there; it is loaded when the endpoint next runs this generation"}
    t0 = time.monotonic()
    try:
        names = ensure_adapters(url, [m], ctx.ws.root)
    except (ModelRequestError, ConfigError) as e:
        raise UpdateFailed(f"the endpoint {url} refused the new adapter: {e}") from e
    return {"loaded": True, "endpoint": url, "serve_names": names, "load_sec": round(time.monotonic() - t0, 3)}


def run_update(req: UpdateRequest, root: Path | None = None) -> UpdateOutcome:
    t0 = time.monotonic()
    if req.objective not in OBJECTIVES:
        raise InputError("--objective", None, f"'{req.objective}' is not one of {', '.join(OBJECTIVES)}")
    backend = BACKENDS.create(req.backend)
    ctx = WorkspaceContext.open(root)
    store, contract, settings = ctx.store, ctx.contract, ctx.settings.train
    if req.steps is not None:
        settings = settings.model_copy(update={"steps": req.steps})
    if req.init is not None:
        if req.init not in ("parent", "base"):
            raise InputError("--init", None, f"'{req.init}' is not one of parent, base")
        settings = settings.model_copy(update={"init": req.init})
    # the contract's KL coefficient is a floor: rsi.yaml may ask for more, never for less
    settings = settings.model_copy(update={"kl_coef": max(contract.training.kl_coef, settings.kl_coef or 0.0)})
    gen = ctx.generation(req.gen)
    cfg, cfg_digest, cfg_source = serving_config(ctx, gen, req.from_jobs)
    req.log(f"serving config: {cfg.name} ({cfg_digest[:12]}), {cfg_source}")
    jobs = _job_ids(ctx, req.from_jobs)
    gate = ConfigGate(ctx, gen.id, cfg, cfg_digest)
    max_turns = min(cfg.loop.max_turns, contract.limits.max_turns)
    templates = task_templates(ctx)
    pool = load_pool(ctx.ws.tasks_dir)
    phrasing_of = {t.digest: t.spec.metadata.rsi.phrasing for t in pool}
    in_skill_templates = frozenset(t.spec.metadata.rsi.template for t in pool if t.split == "holdout"
                                   and t.spec.metadata.rsi.holdout_part == "in_skill" and t.spec.metadata.rsi.template)

    loaded: dict[str, LoadedTrial] = {}
    refusals: dict[str, str] = {}
    suites = suite_digests(ctx)
    rows = [row for agent in SOURCE_AGENTS for row in store.outcomes("update", generation=gen.id, agent=agent)]
    for row in rows:
        if jobs is not None and row.job_id not in jobs:
            continue
        why = gate.refusal(row) if row.task_digest not in suites else \
            "suite task: the regression suites (promotion.suites) are never training data"
        got: LoadedTrial | str = why if why is not None else load_trial(row, ctx.ws.root, max_turns,
                                                                        template=templates.get(row.task_digest))
        if isinstance(got, str):
            refusals[row.id] = got
        else:
            got.phrasing = phrasing_of.get(row.task_digest)
            loaded[row.id] = got
    refused_counts: dict[str, int] = {}
    for why in refusals.values():
        refused_counts[why.split(":")[0]] = refused_counts.get(why.split(":")[0], 0) + 1
    if gen.is_mol or cfg.mol is not None or req.add_specialist is not None:
        from rsi.loop.update.mol import PhaseHooks, run_mol_update  # each specialist on its own domains

        hooks = PhaseHooks(outcome=UpdateOutcome, failed=UpdateFailed, load=_load_into_endpoint,
                           new_id=next_generation_id(ctx),
                           base_dir=_base_model_dir(ctx) if req.backend == "local" else None)
        return run_mol_update(req, ctx, gen, cfg, cfg_digest, cfg_source, loaded, refused_counts, settings,
                              t0, hooks)  # type: ignore[no-any-return]
    if not loaded:
        detail = next(iter(refusals.values()), "no finished harness trials of this generation")
        raise ConfigError(f"rsi update: no trajectory of {gen.id} can train a candidate served with "
                          f"{cfg.name} ({cfg_digest[:12]}); {len(refusals)} refused, e.g. {detail}")
    sel = select([t.record for t in loaded.values()], contract, normalize_std=settings.normalize_std,
                 never_validation=in_skill_templates)
    accepted, validation = set(sel.accepted), set(sel.validation)
    kept = [loaded[t] for t in sel.dataset_ids()]
    replay = gather_replay(ctx, gen, cfg, cfg_digest, max_turns, templates, sel, union=settings.init == "base")
    # refused (exit 2, samples named) before anything is written; replayed samples are checked too
    leakage = check_leakage(ctx, kept, cfg, replay.lines)
    req.log(f"leakage check: {leakage.samples} samples, no sealed task, unseen template, held-out phrasing or "
            f"task equal to a sealed one; highest overlap with an unseen-template reference "
            f"{leakage.max_overlap:.0%}" + (f" ({leakage.max_overlap_with})" if leakage.max_overlap_with else ""))
    if leakage.nearest:
        top = max(leakage.nearest, key=lambda n: n.similarity)
        req.log(f"nearest train reference to each of {len(leakage.nearest)} in-skill holdout task(s): highest "
                f"similarity {top.similarity:.0%} ({top.task} ~ {top.train_task})")
    lines = [
        dataset_line(loaded[t], accepted=t in accepted or t in validation, group_id=sel.group_of[t],
                     sample_index=sel.sample_index[t], advantage=sel.advantages[t], serving_digest=cfg_digest,
                     validation=t in validation)
        for t in sel.dataset_ids()
    ]
    lines += replay.lines
    run_id = f"upd-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    out_dir = req.out or (ctx.ws.state_dir / "updates" / run_id)
    counts = sel.counts()
    counts["samples"] = sample_counts([ln for ln in lines if ln.accepted and not ln.validation])
    counts["leakage"] = leakage.as_json()
    if req.dry_run:
        return UpdateOutcome(run_id="dry-run", generation=gen.id, backend=req.backend, objective=req.objective,
                             config={"name": cfg.name, "digest": cfg_digest, "source": cfg_source},
                             dataset={"path": None, "digest": None, "counts": {"trajectories": len(lines),
                                                                                **counts["samples"]}},
                             selection=counts, refused=refused_counts, replay=replay.summary,
                             wall_sec=round(time.monotonic() - t0, 2))
    info = write_dataset(out_dir / "dataset", lines, {"selection": counts, "refused": refused_counts})
    val = counts["validation"]
    by_source = ", ".join(f"{k} {v}" for k, v in counts["samples"]["by_source"].items()) or "none"
    req.log(f"samples that train, by source: {by_source}; over {len(counts['samples']['by_template'])} "
            f"template(s) in {len(counts['samples']['by_family'])} family(ies)")
    req.log(f"dataset: {info.counts['trajectories']} trajectories ({len(accepted)} accepted over "
            f"{counts['templates']} template(s), {counts['capped']} over the per-template cap; "
            f"{len(replay.lines)} replayed from earlier generations; {val['accepted']} held out for validation "
            f"from {len(val['templates'])} template(s)), "
            f"{counts['groups_with_signal']}/{counts['groups']} groups with signal -> {info.path}")
    params = {"settings": settings.model_dump(mode="json"), "from_jobs": req.from_jobs, "out": str(out_dir),
              "command": req.command, "training_rules": contract.training.model_dump(mode="json"),
              "replay": replay.summary}
    store.start_training_run(run_id, generation=gen.id, backend=req.backend, objective=req.objective,
                             config_digest=cfg_digest, dataset_path=str(info.path), dataset_digest=info.digest,
                             params=params, metrics={"dataset": info.counts})
    outcome = UpdateOutcome(
        run_id=run_id, generation=gen.id, backend=req.backend, objective=req.objective,
        config={"name": cfg.name, "digest": cfg_digest, "source": cfg_source},
        dataset={"path": str(info.path), "digest": info.digest, "counts": info.counts},
        selection=counts, refused=refused_counts, replay=replay.summary,
    )
    try:
        # `init: base` starts a fresh LoRA from the frozen base (its KL reference is the base too)
        parent = gen.adapters.get(settings.lineage) if settings.init == "parent" else None
        base_dir = _base_model_dir(ctx) if req.backend == "local" else None
        treq = TrainRequest(
            dataset=info.path, output_dir=out_dir / "adapter", base_model=gen.base_model.id,
            objective=req.objective, settings=settings, base_model_dir=base_dir,
            parent_adapter=(ctx.ws.resolve(parent.path) if parent else None), log=req.log, progress=req.progress,
            command=req.command, locate_base=lambda: _base_model_dir(ctx),
        )
        result = backend.train(treq)
        outcome.training = {"steps": result.steps, **_loss_summary(result), **result.metrics}
        if result.adapter_dir is None:
            outcome.wall_sec = round(time.monotonic() - t0, 2)
            store.finish_training_run(run_id, status="done", metrics={"training": outcome.training})
            return outcome
        aliases = tuple(str(p) for p in (treq.base_model_dir,) if p is not None)
        adapter = check_peft_dir(result.adapter_dir, gen.base_model.id, aliases)
        _register_candidate(ctx, req, gen, cfg, cfg_digest, info.digest, adapter, result, outcome, settings)
    except (TrainError, AdapterCheckError, UpdateFailed) as e:
        store.finish_training_run(run_id, status="failed", error=str(e), metrics={"training": outcome.training})
        raise UpdateFailed(f"rsi update {run_id} failed, no candidate registered: {e}") from e
    except BaseException as e:
        store.finish_training_run(run_id, status="failed", error=f"{type(e).__name__}: {e}")
        raise
    outcome.wall_sec = round(time.monotonic() - t0, 2)
    return outcome


def _loss_summary(result: TrainResult) -> dict[str, Any]:
    ls = result.losses
    if not ls:
        return {}
    return {"loss_first": round(ls[0], 6), "loss_last": round(ls[-1], 6), "loss_min": round(min(ls), 6),
            "loss_curve": [round(x, 6) for x in ls]}


def _register_candidate(ctx: WorkspaceContext, req: UpdateRequest, gen: GenerationManifest, cfg: HarnessConfig,
                        cfg_digest: str, dataset_digest: str, adapter: AdapterInfo, result: TrainResult,
                        outcome: UpdateOutcome, settings: TrainSettings) -> None:
    lineage = settings.lineage
    store = ctx.store
    new_id = next_generation_id(ctx)
    n = new_id.split("-")[-1]
    sha8 = adapter.sha256[:8]
    serve_name = f"{lineage}-g{n}-{sha8}"
    used = {ref.serve_name for g in store.list_generations() for ref in g.adapters.values()}
    if serve_name in used:  # never reuse a serve name (the endpoint keys its prefix cache on it)
        raise UpdateFailed(f"serve name {serve_name} is already taken")
    rel = Path("adapters") / lineage / f"g{n}-{sha8}"
    dest = ctx.ws.root / rel
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(adapter.path, dest)
    adapters = {lineage: AdapterRef(path=str(rel), sha256=adapter.sha256, serve_name=serve_name)}
    training = {"run": outcome.run_id, "backend": req.backend, "objective": req.objective,
                "dataset_digest": dataset_digest, "steps": result.steps,
                "hyperparameters": settings.model_dump(mode="json"), "dataset": outcome.dataset["counts"],
                "replay": {k: v for k, v in outcome.replay.items() if k != "trials"},
                "validation_slice": outcome.selection.get("validation"),
                **_nearest(outcome.selection.get("leakage") or {}),
                **{k: v for k, v in outcome.training.items() if k not in ("loss_curve", "kl_curve")}}
    expand_jobs = [j.id for j in store.jobs_of(kind="expand", generation=gen.id)
                   if not req.from_jobs or j.id in req.from_jobs]
    # the discover jobs that probed this generation made the tasks it was trained and measured on
    discover_jobs = list(dict.fromkeys([*gen.provenance.discover_jobs, *(
        j.id for j in store.jobs_of(kind="discover", generation=gen.id) if j.parent_job is None)]))
    m = GenerationManifest(
        id=new_id, parent=gen.id, state=GenerationState.CANDIDATE, contract=ctx.contract.hcp,
        base_model=gen.base_model, adapters=adapters, harness_config=HarnessRef(name=cfg.name, digest=cfg_digest),
        provenance=Provenance(discover_jobs=discover_jobs, expand_jobs=expand_jobs,
                              training_run=outcome.run_id, dataset_digest=dataset_digest, training=training),
        metrics=_metrics(outcome, adapter),
    )
    try:
        outcome.loaded = _load_into_endpoint(ctx, cfg, m) if req.load else {"loaded": False, "note": "--no-load"}
    except BaseException:
        shutil.rmtree(dest, ignore_errors=True)
        raise
    path = ctx.ws.generations_dir / f"{new_id}.yaml"
    write_yaml_model(path, m)
    store.put_generation(m)
    outcome.candidate, outcome.manifest_path = new_id, str(path)
    outcome.adapter = {"path": str(rel), "sha256": adapter.sha256, "bytes": adapter.bytes, "serve_name": serve_name,
                       "rank": adapter.rank, "alpha": adapter.alpha, "target_modules": adapter.target_modules}
    store.finish_training_run(outcome.run_id, status="done", candidate=new_id, adapter_path=str(rel),
                              adapter_sha256=adapter.sha256, serve_name=serve_name,
                              metrics={"training": outcome.training, "adapter_bytes": adapter.bytes,
                                       "loaded": outcome.loaded, "selection": outcome.selection})


def _nearest(leakage: dict[str, Any]) -> dict[str, Any]:
    """The manifest's part of the leakage report: every in-skill holdout task's nearest train reference."""
    keys = ("in_skill_max_similarity", "in_skill_max_similarity_with", "in_skill_nearest_train_reference")
    return {"leakage": {k: leakage[k] for k in keys}} if "in_skill_nearest_train_reference" in leakage else {}


def _metrics(outcome: UpdateOutcome, adapter: AdapterInfo) -> dict[str, float]:
    c, t = outcome.dataset["counts"], outcome.training
    out: dict[str, float] = {
        "train_trajectories": float(c.get("trajectories", 0)),
        "train_accepted": float(c.get("accepted", 0)),
        "train_groups_with_signal": float(outcome.selection.get("groups_with_signal", 0)),
        "train_steps": float(t.get("steps", 0)),
        "adapter_bytes": float(adapter.bytes),
    }
    for k in ("wall_sec", "logprob_before", "logprob_after", "logprob_delta", "loss_first", "loss_last", "kl_coef",
              "kl_last"):
        if isinstance(t.get(k), int | float):
            out[f"train_{k}"] = float(t[k])
    v = t.get("validation") or {}
    if v.get("curve"):
        out["train_validation_best_step"] = float(v["best_step"])
        if v.get("stopped_at") is not None:
            out["train_validation_stopped_at"] = float(v["stopped_at"])
    out["train_replayed"] = float(c.get("replay", 0))
    return out


__all__ = ["UpdateFailed", "UpdateOutcome", "UpdateRequest", "next_generation_id", "run_update", "serving_config"]
