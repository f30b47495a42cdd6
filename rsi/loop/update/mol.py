"""Update for a Mixture-of-LoRA generation: each specialist trains on its own domains only.

Entered from `run_update` when the generation holds a mixture, when the serving config has a `mol`
section (the first mixture is made from a one-adapter or adapter-less parent), or with
`--add-specialist LABEL --domains F,...`:

1. **domains**: the parent's (a mixture), else the config's `mol.domains`; `--add-specialist` adds a label
   for families no specialist serves yet (the other labels keep theirs).
2. **partition**: every loaded trial goes to the label serving its task's family. A trial answered by
   another adapter than its family's (misrouted) is refused for the specialist: its prompt is another
   adapter's view.
3. **per label**: selection (rsi.core.training.select) on that label's trials alone -> its own dataset ->
   the backend, starting from the label's parent revision (a mixture's own adapter; the one adapter of a
   one-adapter parent; else the base). `L0` also gets **routing examples**: for every *train* task of the
   pool, its route prompt (rsi.harness.mol.route_prompt) -> the gold label of its family. Holdout tasks
   never become routing examples.
4. **untouched**: a label with nothing accepted keeps its adapter reference as it was — same path, same
   sha256, same serve name (its bytes are never copied or rewritten). A new label with nothing to train on
   starts as the parent's one adapter (it answered those families), else as an identity LoRA (the candidate's
   L0 with its B matrices zeroed: it answers as the base does), under its own serve name.
5. **candidate**: new revisions go to `adapters/<lineage>/<label>/g<N>-<sha8>/` with serve names
   `<lineage>-<label>-g<N>-<sha8>` (never reused); the manifest (schema 2) lists every label with its role
   and domains. Replay of earlier generations is not done for mixtures.
"""

from __future__ import annotations

import json
import secrets
import shutil
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from rsi.core.errors import ConfigError, InputError
from rsi.core.generation import AdapterRef, GenerationManifest, GenerationState, HarnessRef, Provenance
from rsi.core.harness_config import HarnessConfig
from rsi.core.mol import LABEL_RE, ROUTER, ROUTER_ROLE, SPECIALIST_ROLE, MolSpec
from rsi.core.training import TrainSettings, select
from rsi.harness.mol import route_prompt
from rsi.loop.context import WorkspaceContext
from rsi.loop.update.data import LoadedTrial, dataset_line
from rsi.store.files import load_pool, write_yaml_model
from rsi.train.backends import BACKENDS
from rsi.train.base import TrainRequest
from rsi.train.dataset import DatasetLine, write_dataset
from rsi.train.peft_dir import check_peft_dir, write_identity_adapter


@dataclass
class PhaseHooks:
    """What the update phase hands over (passed in, so this module never imports the phase)."""

    outcome: Callable[..., Any]  # UpdateOutcome
    failed: type[Exception]  # UpdateFailed
    load: Callable[[WorkspaceContext, HarnessConfig, GenerationManifest], dict[str, Any]]
    new_id: str
    base_dir: Path | None


@dataclass
class LabelPlan:
    label: str
    domains: list[str]
    trials: list[LoadedTrial] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    routing: int = 0
    counts: dict[str, Any] = field(default_factory=dict)
    result: dict[str, Any] = field(default_factory=dict)


def mol_domains(gen: GenerationManifest, cfg: HarnessConfig, add: str | None,
                add_domains: list[str]) -> dict[str, list[str]]:
    """The candidate's label -> families map (validated), with a new specialist added if asked."""
    if gen.is_mol:
        domains = gen.mol_domains()
    elif cfg.mol is not None:
        domains = dict(cfg.mol.domains)
    else:
        raise InputError("--add-specialist", None, f"{gen.id} is not a mixture and its config has no mol.domains")
    if add is not None:
        if not LABEL_RE.match(add) or add in domains:
            raise InputError("--add-specialist", None,
                             f"'{add}' must be a new label L<k> (taken: {', '.join(domains)})")
        if not add_domains:
            raise InputError("--domains", None, "a new specialist needs the families it serves (--domains F,...)")
        for f in add_domains:
            owner = next((lab for lab, fs in domains.items() if f in fs), None)
            if owner is not None:
                raise InputError("--domains", None, f"family '{f}' is served by {owner}: a new specialist takes "
                                 "new families only (its weights can never overwrite another's)")
        domains[add] = list(add_domains)
    return MolSpec(domains=domains).domains


def _family(t: LoadedTrial, pool_family: dict[str, str]) -> tuple[str | None, str | None]:
    """(family, the label that answered) from the trajectory (MoL trials record both), else the pool."""
    answered: str | None = None
    family: str | None = None
    try:
        rsi = json.loads((Path(t.trial_dir) / "trajectory.json").read_text()).get("extra", {}).get("rsi", {})
        mol = rsi.get("mol") or {}
        family = mol.get("family") or rsi.get("family")
        routes = mol.get("routes") or []
        answered = routes[-1]["label"] if routes else None
    except (OSError, ValueError, KeyError, TypeError):
        pass
    return family or pool_family.get(t.record.task_digest), answered


def routing_lines(ctx: WorkspaceContext, cfg: HarnessConfig, domains: dict[str, list[str]]) -> list[DatasetLine]:
    """L0's routing examples: every *train* task's route prompt -> its family's label (SFT, accepted)."""
    spec = MolSpec(domains=domains)
    out: list[DatasetLine] = []
    for task in sorted(load_pool(ctx.ws.tasks_dir), key=lambda t: t.name):
        if task.spec.metadata.rsi.split != "train":
            continue
        msgs = route_prompt(cfg, ctx.contract, task, domains)
        gold = spec.label_of(task.family)
        out.append(DatasetLine(
            messages=[*msgs, {"role": "assistant", "content": gold}], tools=[], reward=1.0, accepted=True,
            group_id=f"route:{task.digest[:12]}", sample_index=0, advantage=0.0, prompt_messages=len(msgs),
            provenance={"routing": True, "task": task.name, "task_digest": task.digest, "family": task.family,
                        "label": gold}))
    return out


def plan_labels(ctx: WorkspaceContext, loaded: dict[str, LoadedTrial],
                domains: dict[str, list[str]]) -> dict[str, LabelPlan]:
    spec = MolSpec(domains=domains)
    pool_family = {t.digest: t.family for t in load_pool(ctx.ws.tasks_dir)}
    plans = {lab: LabelPlan(lab, fams) for lab, fams in domains.items()}
    for tid, t in loaded.items():
        family, answered = _family(t, pool_family)
        label = spec.label_of(family or "")
        if answered is not None and answered != label:
            plans[label].refused[tid] = f"misrouted: answered by {answered}, family {family} is {label}'s"
            continue
        plans[label].trials.append(t)
    return plans


def train_mol(ctx: WorkspaceContext, req: Any, gen: GenerationManifest, cfg: HarnessConfig, cfg_digest: str,
              loaded: dict[str, LoadedTrial], settings: TrainSettings, run_id: str, out_dir: Path,
              base_dir: Path | None, new_id: str) -> tuple[dict[str, AdapterRef], dict[str, LabelPlan], dict[str, Any]]:
    """Train every label that has something new; return the candidate's adapters, the plans, a summary."""
    domains = mol_domains(gen, cfg, getattr(req, "add_specialist", None), list(getattr(req, "domains", []) or []))
    plans = plan_labels(ctx, loaded, domains)
    backend = BACKENDS.create(req.backend)
    n = new_id.split("-")[-1]
    taken = {ref.serve_name for g in ctx.store.list_generations() for ref in g.adapters.values()}
    refs: dict[str, AdapterRef] = {}
    single = next(iter(gen.adapters.values())) if gen.adapters and not gen.is_mol else None
    for label, plan in plans.items():
        lines: list[DatasetLine] = []
        if plan.trials:
            sel = select([t.record for t in plan.trials], ctx.contract, normalize_std=settings.normalize_std)
            keep = set(sel.accepted) | set(sel.validation)
            by_id = {t.record.trial_id: t for t in plan.trials}
            lines = [dataset_line(by_id[t], accepted=t in keep, group_id=sel.group_of[t],
                                  sample_index=sel.sample_index[t], advantage=sel.advantages[t],
                                  serving_digest=cfg_digest, validation=t in set(sel.validation))
                     for t in sel.dataset_ids()]
            plan.counts = sel.counts()
        if label == ROUTER:
            route = routing_lines(ctx, cfg, domains)
            plan.routing = len(route)
            lines += route
        trains = any(ln.accepted and not ln.validation for ln in lines)
        parent = gen.adapters.get(label) if gen.is_mol else single
        if not trains:
            if label in gen.adapters and gen.is_mol:
                refs[label] = gen.adapters[label]  # untouched: same bytes, sha256 and serve name
                plan.result = {"changed": False, "why": "nothing accepted for its domains"}
            continue
        info = write_dataset(out_dir / label / "dataset", lines, {"label": label, "selection": plan.counts})
        req.log(f"{label} ({', '.join(plan.domains) or 'chat'}): {info.counts['trajectories']} lines "
                f"({plan.routing} routing examples), from {'its parent revision' if parent else 'the base'}")
        t0 = time.monotonic()
        result = backend.train(TrainRequest(
            dataset=info.path, output_dir=out_dir / label / "adapter", base_model=gen.base_model.id,
            objective=req.objective, settings=settings, base_model_dir=base_dir,
            parent_adapter=ctx.ws.resolve(parent.path) if parent else None, log=req.log, progress=req.progress,
            command=req.command))
        if result.adapter_dir is None:  # `export`: the datasets are the product; no candidate comes of them
            plan.result = {"changed": False, "exported": str(info.path), "dataset_digest": info.digest,
                           "lines": info.counts.get("trajectories")}
            continue
        aliases = tuple(str(p) for p in (base_dir,) if p is not None)
        adapter = check_peft_dir(result.adapter_dir, gen.base_model.id, aliases)
        refs[label] = _place(ctx, settings.lineage, label, n, adapter.path, adapter.sha256, domains[label], taken)
        plan.result = {"changed": True, "steps": result.steps, "dataset_digest": info.digest,
                       "lines": info.counts.get("trajectories"), "wall_sec": round(time.monotonic() - t0, 2),
                       "sha256": adapter.sha256, "serve_name": refs[label].serve_name}
    exported = {lab: p.result["exported"] for lab, p in plans.items() if p.result.get("exported")}
    if exported:
        return {}, plans, {"run": run_id, "candidate": None, "domains": domains, "exported": exported,
                           "labels": {lab: {"domains": p.domains, "trials": len(p.trials), "refused": len(p.refused),
                                            "routing_examples": p.routing, **p.result} for lab, p in plans.items()}}
    if not any(p.result.get("changed") for p in plans.values()) and getattr(req, "add_specialist", None) is None:
        raise ConfigError(f"rsi update: no adapter of {gen.id} has anything new to train on")
    # A new label with nothing of its own starts as what answered its families before: the parent's one adapter,
    # else (the parent was the base, or the families are new) an identity LoRA, which answers as the base does.
    # Never as a copy of L0: L0 learns to answer route prompts with a label.
    donor = refs.get(ROUTER)  # the shape an identity LoRA copies
    for label, plan in plans.items():
        if label in refs:
            continue
        if single is not None:
            src, sha, why = ctx.ws.resolve(single.path), single.sha256, "new label: the parent's adapter"
        elif donor is not None:
            aliases = tuple(str(p) for p in (base_dir,) if p is not None)
            ident = write_identity_adapter(ctx.ws.resolve(donor.path), out_dir / label / "identity",
                                           gen.base_model.id, aliases)
            src, sha, why = ident.path, ident.sha256, "new label: an identity LoRA (answers as the base model)"
        else:
            raise ConfigError("rsi update: L0 has nothing to train on (no accepted chat trajectory and no train "
                              "task to make routing examples from) and the parent has no adapter to start it from")
        refs[label] = _place(ctx, settings.lineage, label, n, src, sha, domains[label], taken)
        plan.result = {"changed": True, "why": why, "serve_name": refs[label].serve_name}
    for label, ref in refs.items():
        refs[label] = ref.model_copy(update={"role": ROUTER_ROLE if label == ROUTER else SPECIALIST_ROLE,
                                             "domains": list(domains[label])})
    summary = {"run": run_id, "candidate": new_id, "domains": domains,
               "labels": {lab: {"domains": p.domains, "trials": len(p.trials), "refused": len(p.refused),
                                "routing_examples": p.routing, **p.result} for lab, p in plans.items()}}
    return refs, plans, summary


def _place(ctx: WorkspaceContext, lineage: str, label: str, n: str, src: Path, sha256: str, domains: list[str],
           taken: set[str]) -> AdapterRef:
    sha8 = sha256[:8]
    serve = f"{lineage}-{label.lower()}-g{n}-{sha8}"
    if serve in taken:
        raise ConfigError(f"serve name {serve} is already taken (a serve name is never reused)")
    taken.add(serve)
    rel = Path("adapters") / lineage / label.lower() / f"g{n}-{sha8}"
    dest = ctx.ws.root / rel
    if dest.exists():
        shutil.rmtree(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    shutil.copytree(src, dest)
    return AdapterRef(path=str(rel), sha256=sha256, serve_name=serve, domains=list(domains))


def register_mol(ctx: WorkspaceContext, gen: GenerationManifest, cfg: HarnessConfig, cfg_digest: str,
                 refs: dict[str, AdapterRef], summary: dict[str, Any], run_id: str,
                 metrics: dict[str, float]) -> GenerationManifest:
    store = ctx.store
    changed = [lab for lab, r in refs.items()
               if lab not in gen.adapters or gen.adapters[lab].serve_name != r.serve_name]
    metrics = {**metrics, "mol_adapters": float(len(refs)), "mol_adapters_changed": float(len(changed))}
    expand_jobs = [j.id for j in store.jobs_of(kind="expand", generation=gen.id)]
    discover_jobs = list(dict.fromkeys([*gen.provenance.discover_jobs, *(
        j.id for j in store.jobs_of(kind="discover", generation=gen.id) if j.parent_job is None)]))
    m = GenerationManifest(
        schema_version=2, id=summary["candidate"], parent=gen.id, state=GenerationState.CANDIDATE,
        contract=ctx.contract.hcp, base_model=gen.base_model, adapters=refs,
        harness_config=HarnessRef(name=cfg.name, digest=cfg_digest),
        provenance=Provenance(discover_jobs=discover_jobs, expand_jobs=expand_jobs, training_run=run_id,
                              training={"mol": {**summary, "changed": changed}}),
        metrics=metrics)
    return m


def run_mol_update(req: Any, ctx: WorkspaceContext, gen: GenerationManifest, cfg: HarnessConfig, cfg_digest: str,
                   cfg_source: str, loaded: dict[str, LoadedTrial], refused: dict[str, int],
                   settings: TrainSettings, t0: float, hooks: PhaseHooks) -> Any:
    """`rsi update` for a mixture (see the module docstring); returns the phase's UpdateOutcome."""
    run_id = f"upd-{datetime.now(UTC):%Y%m%d-%H%M%S}-{secrets.token_hex(3)}"
    out_dir = req.out or (ctx.ws.state_dir / "updates" / run_id)
    ctx.store.start_training_run(run_id, generation=gen.id, backend=req.backend, objective=req.objective,
                                 config_digest=cfg_digest, dataset_path=str(out_dir), dataset_digest="mol",
                                 params={"settings": settings.model_dump(mode="json"), "mol": True,
                                         "add_specialist": req.add_specialist, "domains": req.domains},
                                 metrics={})
    outcome = hooks.outcome(run_id=run_id, generation=gen.id, backend=req.backend, objective=req.objective,
                            config={"name": cfg.name, "digest": cfg_digest, "source": cfg_source},
                            dataset={"path": str(out_dir), "digest": "mol", "counts": {}}, selection={},
                            refused=refused)
    placed: list[Path] = []
    try:
        refs, plans, summary = train_mol(ctx, req, gen, cfg, cfg_digest, loaded, settings, run_id, out_dir,
                                         hooks.base_dir, hooks.new_id)
        if summary.get("exported"):  # the export backend: each label's dataset written, nothing registered
            for lab, path in summary["exported"].items():
                req.log(f"{lab}: dataset written to {path}; the {req.backend} backend trains nothing")
            outcome.training = {"mol": summary["labels"]}
            outcome.dataset = {"path": str(out_dir), "digest": "mol", "counts": {}, "labels": summary["exported"]}
            ctx.store.finish_training_run(run_id, status="done", metrics={"mol": summary["labels"]})
            outcome.wall_sec = round(time.monotonic() - t0, 2)
            return outcome
        placed = [ctx.ws.root / r.path for lab, r in refs.items() if gen.adapters.get(lab) is None
                  or gen.adapters[lab].serve_name != r.serve_name]
        m = register_mol(ctx, gen, cfg, cfg_digest, refs, summary, run_id,
                         {"train_trajectories": float(sum(len(p.trials) for p in plans.values())),
                          "train_routing_examples": float(plans[ROUTER].routing)})
        outcome.loaded = hooks.load(ctx, cfg, m) if req.load else {"loaded": False, "note": "--no-load"}
        path = ctx.ws.generations_dir / f"{m.id}.yaml"
        write_yaml_model(path, m)
        ctx.store.put_generation(m)
    except BaseException as e:
        for d in placed:
            shutil.rmtree(d, ignore_errors=True)
        ctx.store.finish_training_run(run_id, status="failed", error=f"{type(e).__name__}: {e}")
        if isinstance(e, ConfigError | InputError | KeyboardInterrupt):
            raise
        raise hooks.failed(f"rsi update {run_id} failed, no candidate registered: {e}") from e
    outcome.candidate, outcome.manifest_path = m.id, str(path)
    outcome.training = {"mol": summary["labels"]}
    outcome.adapter = {lab: {"serve_name": r.serve_name, "sha256": r.sha256, "path": r.path,
                             "changed": lab in m.provenance.training["mol"]["changed"]}  # type: ignore[index]
                       for lab, r in m.adapters.items()}
    ctx.store.finish_training_run(run_id, status="done", candidate=m.id, serve_name=m.serve_name(),
                                  metrics={"mol": summary["labels"], "loaded": outcome.loaded})
    outcome.wall_sec = round(time.monotonic() - t0, 2)
    return outcome


__all__ = ["LabelPlan", "PhaseHooks", "mol_domains", "plan_labels", "register_mol", "routing_lines", "run_mol_update",
           "train_mol"]
