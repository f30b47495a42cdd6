"""`rsi diff A B`: what changed between two generations, read from the store.

- **config**: unified diff of the canonical YAML of both harness configs (by digest, from the store);
- **adapter**: names, digests, serve names, rank (the adapter's own adapter_config.json when present),
  training run, dataset size and provenance;
- **contract**: both versions; pass rates are compared only under one contract major (else refused,
  and the report says why);
- **rates per holdout part**: the in-skill, unseen-template and no-forgetting parts of the sealed holdout (as they
  were at that pair's promotion: rsi.report.rates.pair_parts), each side's pooled
  rate over the part's tasks both ran, and the suite's, beside each other: the very figures the promote gate
  computes for that pair (rsi.report.rates.gate_figures calls the gate's own functions); the holdout pooled over
  both parts is kept in `overall`, labelled so (no gate uses it when the holdout has two parts);
- **outcomes**: per-task flips on the tasks both generations ran under their own configs (a task is
  *solved* at pass rate >= 0.5), per-family pass rates with Wilson intervals, the overall delta and
  the paired test's one-sided p over tasks (B better than A: the direction and test the promotion gate
  uses; holdout tasks when both ran some, else every common task), and the same per template (the
  contract's `promotion.holdout_unit`): per-template rates and the
  paired test clustered on templates (per-template mean differences), the unit promotion gates on;
- **gates**: when `rsi promote` decided B over A, its gate table (the decision) and the very p-values it
  gated on, first;
- **attribution shift**: verdict counts per kind for A and B, and how the common tasks moved;
- **spend**: trials, tokens and wall time per generation and phase.

Every rate counts what the promote gate counts, through the one computation (rsi.store.queries_rates.pass_tally,
scoped by rsi.report.rates): the model arms only (never the oracle, nop, known-wrong or other controls), each
generation under its own config, discover's probe left out (it selected the tasks), infra errors apart, the
contract's promotion integrity levels and the first K trials per task; the report says so (`counts`).
"""

from __future__ import annotations

import difflib
import json
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from rsi.core.discover import unit_of
from rsi.core.errors import InputError
from rsi.core.generation import GenerationManifest
from rsi.core.promotion import TaskOutcome, clustered, paired_p, test_name, wilson
from rsi.report.rates import COUNTS, gate_figures, gate_scope, generation_tally, look_scope, task_meta
from rsi.store.queries_rates import PassTally

# An opened workspace (rsi.loop.context.WorkspaceContext or rsi.view.context.ViewContext: .ws, .contract,
# .reader (rsi.store.queries_diff.DiffQueries: every read below), .config_by_digest); typed loosely because
# report sits beside loop, not above it.
Ctx = Any
SOLVED_AT = 0.5
FLIPS = ("fixed", "regressed", "still_failing", "still_passing")
# the report's paired tests, per task and per template: one-sided (B better), as the promotion gate tests them
ALTERNATIVE = "greater"
FLIP_LINKS = 100  # flipped tasks the report lists with links to their trials (the rest are counted)
FLIP_TRIALS = 4  # counted trials linked per side of a flipped task


def config_diff(a_yaml: str, b_yaml: str, a_label: str, b_label: str) -> str:
    """Unified diff of two canonical YAML texts ('' when they are equal)."""
    return "".join(difflib.unified_diff(a_yaml.splitlines(keepends=True), b_yaml.splitlines(keepends=True),
                                        fromfile=a_label, tofile=b_label))


def flip(a_rate: float, b_rate: float) -> str:
    a, b = a_rate >= SOLVED_AT, b_rate >= SOLVED_AT
    return {(False, True): "fixed", (True, False): "regressed", (False, False): "still_failing"}.get(
        (a, b), "still_passing")


@dataclass
class FamilyRow:
    family: str
    tasks: int
    a: tuple[int, int]  # passes, graded trials
    b: tuple[int, int]
    a_ci: tuple[float, float]
    b_ci: tuple[float, float]

    @property
    def a_rate(self) -> float:
        return self.a[0] / self.a[1] if self.a[1] else 0.0

    @property
    def b_rate(self) -> float:
        return self.b[0] / self.b[1] if self.b[1] else 0.0


@dataclass
class DiffReport:
    a: str
    b: str
    manifests: dict[str, Any]
    config: dict[str, Any]
    adapter: dict[str, Any]
    contract: dict[str, Any]
    comparable: bool
    refusal: str | None
    tasks: list[dict[str, Any]] = field(default_factory=list)  # name, family, split, a/b passes+trials, flip
    flips: dict[str, int] = field(default_factory=dict)
    families: list[FamilyRow] = field(default_factory=list)
    overall: dict[str, Any] = field(default_factory=dict)
    templates: list[dict[str, Any]] = field(default_factory=list)  # per unit of the overall scope
    # per holdout part (in_skill, unseen, no_forgetting: those the holdout has), then the suite: the gate's figures
    parts: list[dict[str, Any]] = field(default_factory=list)
    attribution: dict[str, Any] = field(default_factory=dict)
    spend: list[dict[str, Any]] = field(default_factory=list)
    gate: dict[str, Any] = field(default_factory=dict)  # {"job": id, "verdict": ...} of `rsi promote B` over A
    # the training run that made B's adapter: id, status, steps, loss per step, validation log-probability curve
    training: dict[str, Any] = field(default_factory=dict)
    root: str = ""  # the workspace the trials' dirs are relative to
    # whose trials the rates count: per side the agents and config, the scope (parts, K per task), and in words
    counts: dict[str, str] = field(default_factory=dict)

    def as_json(self) -> dict[str, Any]:
        out = asdict(self)
        out["families"] = [{**asdict(f), "a_rate": f.a_rate, "b_rate": f.b_rate} for f in self.families]
        return out


def _config_yaml(ctx: Ctx, digest: str) -> str:
    stored = ctx.reader.config_yaml(digest)
    if stored is not None:
        return str(stored)
    try:  # not stored yet: from a file with that digest, else say so
        return str(ctx.config_by_digest(digest).canonical_yaml())
    except Exception:  # noqa: BLE001
        return f"# config {digest} is not in the store\n"


def _adapter(ctx: Ctx, g: GenerationManifest) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, ref in g.adapters.items():
        info: dict[str, Any] = {"path": ref.path, "sha256": ref.sha256, "serve_name": ref.serve_name}
        cfg = ctx.ws.resolve(ref.path) / "adapter_config.json"
        if cfg.is_file():
            try:
                raw = json.loads(cfg.read_text())
                info.update({"rank": raw.get("r"), "alpha": raw.get("lora_alpha")})
            except (OSError, ValueError):
                pass
        out[name] = info
    prov = g.provenance
    training = prov.training or {}
    return {"adapters": out, "training_run": prov.training_run, "dataset_digest": prov.dataset_digest,
            "dataset": training.get("dataset"), "backend": training.get("backend"),
            "objective": training.get("objective"), "steps": training.get("steps"),
            "expand_jobs": prov.expand_jobs, "discover_jobs": prov.discover_jobs}


def _families(ctx: Ctx, names: set[str]) -> dict[str, str]:
    """task name -> family, from tasks/ (the store's task rows when the file is gone)."""
    fam = ctx.reader.task_families()
    return {n: fam.get(n, "misc") for n in names}


def _units(ctx: Ctx, names: set[str]) -> tuple[str, dict[str, str]]:
    """The contract's holdout unit and task name -> unit, from tasks/ (a task no longer there: its own unit)."""
    unit = ctx.contract.promotion.holdout_unit
    meta = task_meta(ctx)
    out = {n: unit_of(unit, template=meta[n].template, family=meta[n].family, task=n)
           if n in meta else f"task:{n}" for n in names}
    has = any(not u.startswith("task:") for u in out.values())
    return (unit if has else "task"), out


def _per_unit(ctx: Ctx, rows: list[dict[str, Any]]) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """The clustered figures over `rows` (tasks of the overall scope) and one row per unit."""
    unit, of = _units(ctx, {t["task"] for t in rows})
    a = {t["task"]: TaskOutcome(t["task"], t["family"], t["a_passes"], t["a_trials"], unit=of[t["task"]])
         for t in rows}
    b = {t["task"]: TaskOutcome(t["task"], t["family"], t["b_passes"], t["b_trials"], unit=of[t["task"]])
         for t in rows}
    units, delta, p = clustered(a, b, sorted(a), alternative=ALTERNATIVE)
    for t in rows:
        t["unit"] = of[t["task"]]
    figures = {"unit": unit, "units": len(units), "unit_delta": delta if units else None, "unit_p_value": p,
               "unit_test": f"paired {test_name(len(units))}, {ALTERNATIVE}, over per-{unit} mean differences"}
    return figures, [{"unit": u.unit, "tasks": u.tasks, "a_rate": u.parent, "b_rate": u.candidate,
                      "delta": u.delta} for u in units]


def mol_changes(a: GenerationManifest, b: GenerationManifest) -> dict[str, Any]:
    """Mixture-of-LoRA: per label, which revisions moved (serve name / sha256), and each side's routing accuracy."""
    rows = []
    for label in sorted(set(a.adapters) | set(b.adapters), key=lambda x: (len(x), x)):
        ra, rb = a.adapters.get(label), b.adapters.get(label)
        state = ("added" if ra is None else "removed" if rb is None else
                 "kept" if ra.serve_name == rb.serve_name and ra.sha256 == rb.sha256 else "moved")
        ref = rb if rb is not None else ra
        rows.append({"label": label, "state": state, "domains": (ref.domains or []) if ref is not None else [],
                     "a": ra.serve_name if ra else None, "b": rb.serve_name if rb else None,
                     "a_sha256": ra.sha256 if ra else None, "b_sha256": rb.sha256 if rb else None})
    serving = {k.removeprefix("mol_"): v for k, v in b.metrics.items() if k.startswith("mol_") and "adapters" not in k}
    return {"labels": rows, "routing_accuracy": {"a": a.metrics.get("routing_accuracy"),
                                                 "b": b.metrics.get("routing_accuracy")}, "serving": serving}


def build_diff(ctx: Ctx, a_id: str, b_id: str, agent: str | None = None) -> DiffReport:
    """The report of B against A. Every rate counts what the promote gate counts (rsi.report.rates): the model
    arms (`agent`: only that one, e.g. the agent a promotion measured), each generation's own config."""
    store = ctx.reader
    a, b = store.generation_manifest(a_id), store.generation_manifest(b_id)
    if a.id == b.id:
        raise InputError(b_id, None, f"is the same generation as {a_id}: nothing to compare (give two generations)")
    a_yaml, b_yaml = _config_yaml(ctx, a.harness_config.digest), _config_yaml(ctx, b.harness_config.digest)
    config = {"a": {"name": a.harness_config.name, "digest": a.harness_config.digest},
              "b": {"name": b.harness_config.name, "digest": b.harness_config.digest},
              "same": a.harness_config.digest == b.harness_config.digest,
              "unified_diff": config_diff(a_yaml, b_yaml, f"{a.id}/{a.harness_config.name}.yaml",
                                          f"{b.id}/{b.harness_config.name}.yaml")}
    adapter = {"a": _adapter(ctx, a), "b": _adapter(ctx, b),
               "same": {k: v.sha256 for k, v in a.adapters.items()} == {k: v.sha256 for k, v in b.adapters.items()}}
    if a.is_mol or b.is_mol:
        adapter["mol"] = mol_changes(a, b)
    a_major, b_major = int(a.contract.split(".")[0]), int(b.contract.split(".")[0])
    comparable = a_major == b_major
    refusal = None if comparable else (
        f"pass rates are not compared: {a.id} ran under hcp {a.contract} and {b.id} under hcp {b.contract}; "
        "a new contract major may change grading, limits or the substrate, so the rates measure different things")
    report = DiffReport(a.id, b.id, {"a": a.model_dump(mode="json"), "b": b.model_dump(mode="json")}, config,
                        adapter, {"a": a.contract, "b": b.contract, "same_major": comparable}, comparable, refusal)
    report.root = str(ctx.ws.root)
    report.spend = store.phase_usage([a.id, b.id])
    report.training = _training(ctx, b)
    report.attribution = _attribution(ctx, a.id, b.id)
    got = store.promote_verdict(b.id, a.id)
    if got is not None:
        report.gate = {"job": got[0], "verdict": got[1]}
    if not comparable:
        return report
    # the trials the deciding promote gated on: a promote that stopped early saw fewer per task than a parent
    # measured to the end in its own promotion has
    rate_scope = look_scope(gate_scope(ctx, parts=None), got[1] if got is not None else None, ctx.contract.promotion)
    who = None if agent is None else [agent]
    ta, tb = (generation_tally(ctx, g.id, rate_scope, who) for g in (a, b))
    report.counts = {"a": ta.covers(), "b": tb.covers(), "scope": rate_scope.describe(), "what": COUNTS}
    ca, cb = ta.tasks, tb.tasks
    common = sorted(n for n in set(ca) & set(cb) if ca[n].graded and cb[n].graded)
    fams = _families(ctx, set(common))
    flips = dict.fromkeys(FLIPS, 0)
    fam_acc: dict[str, list[int]] = {}
    for n in common:
        x, y = ca[n], cb[n]
        ra, rb = x.passes / x.graded, y.passes / y.graded
        f = flip(ra, rb)
        flips[f] += 1
        report.tasks.append({"task": n, "family": fams[n], "split": x.part, "holdout_part": x.holdout_part,
                             "a_passes": x.passes,
                             "a_trials": x.graded, "b_passes": y.passes, "b_trials": y.graded, "a_rate": ra,
                             "b_rate": rb, "flip": f})
        acc = fam_acc.setdefault(fams[n], [0, 0, 0, 0, 0])
        acc[0] += 1
        acc[1] += x.passes
        acc[2] += x.graded
        acc[3] += y.passes
        acc[4] += y.graded
    report.flips = flips if common else {}
    _flip_trials(ctx, report, ta, tb)
    report.families = [FamilyRow(f, v[0], (v[1], v[2]), (v[3], v[4]), wilson(v[1], v[2]), wilson(v[3], v[4]))
                       for f, v in sorted(fam_acc.items())]
    report.parts = gate_figures(ctx, ta, tb).rows()
    holdout = [t for t in report.tasks if t["split"] == "holdout"]
    two = len({t["holdout_part"] for t in holdout}) > 1  # one part only: the pooled figure is that part's
    scope, rows = (("holdout, both parts pooled" if two else "holdout"), holdout) if holdout else \
        ("all common tasks", report.tasks)
    ra_list, rb_list = [t["a_rate"] for t in rows], [t["b_rate"] for t in rows]
    pa, na = sum(t["a_passes"] for t in rows), sum(t["a_trials"] for t in rows)
    pb, nb = sum(t["b_passes"] for t in rows), sum(t["b_trials"] for t in rows)
    report.overall = {
        "scope": scope, "tasks": len(rows), "a_rate": pa / na if na else None, "b_rate": pb / nb if nb else None,
        "a_ci": wilson(pa, na), "b_ci": wilson(pb, nb), "a_trials": na, "b_trials": nb,
        "delta": (sum(rb_list) - sum(ra_list)) / len(rows) if rows else None,
        "p_value": paired_p(ra_list, rb_list, alternative=ALTERNATIVE),
        "test": f"paired {test_name(len(rows))}, {ALTERNATIVE}, over tasks",
    }
    figures, report.templates = _per_unit(ctx, rows)
    report.overall.update(figures)
    return report


def _flip_trials(ctx: Ctx, report: DiffReport, ta: PassTally, tb: PassTally) -> None:
    """The fixed and regressed tasks (regressions first, at most FLIP_LINKS) get the trials their figures counted,
    up to FLIP_TRIALS per side (passing ones first): the report links to them."""
    shown = sorted((t for t in report.tasks if t["flip"] in ("fixed", "regressed")),
                   key=lambda t: (t["flip"] != "regressed", t["task"]))[:FLIP_LINKS]
    if not shown:
        return
    ids = [i for t in shown for tally in (ta, tb) for i in tally.tasks[t["task"]].counted]
    brief = ctx.reader.trial_briefs(ids)
    for t in shown:
        for side, tally in (("a", ta), ("b", tb)):
            got = [brief[i] for i in tally.tasks[t["task"]].counted if i in brief]
            t[f"{side}_trial_ids"] = sorted(got, key=lambda x: (not x["passed"], x["id"]))[:FLIP_TRIALS]


def _training(ctx: Ctx, g: GenerationManifest) -> dict[str, Any]:
    """The training run that made `g`'s adapter, with its per-step curves ({} when `g` was not trained)."""
    run_id = g.provenance.training_run
    if not run_id:
        return {}
    row = ctx.reader.training_run_info(run_id)
    if row is None:  # a manifest naming a run this store lacks: show what the manifest says
        return {"run": run_id, "status": "not in the store"}
    tr = dict(row["metrics"].get("training") or {})
    val = tr.get("validation") or {}
    return {"run": run_id, "status": row["status"], "backend": row["backend"], "objective": row["objective"],
            "steps": tr.get("steps") or len(tr.get("loss_curve") or []),
            "loss_curve": list(tr.get("loss_curve") or []), "kl_curve": list(tr.get("kl_curve") or []),
            "validation_curve": [list(x) for x in val.get("curve") or []],
            "logprob_before": tr.get("logprob_before"), "logprob_after": tr.get("logprob_after"),
            "loss_first": tr.get("loss_first"), "loss_last": tr.get("loss_last")}


def _attribution(ctx: Ctx, a_id: str, b_id: str) -> dict[str, Any]:
    kinds = ("model", "task", "config", "infra")
    va, vb = ctx.reader.attribution_kinds(a_id), ctx.reader.attribution_kinds(b_id)
    counts = {g: {k: sum(1 for v in d.values() if v == k) for k in kinds} for g, d in (("a", va), ("b", vb))}
    moved: dict[str, int] = {}
    for digest in set(va) | set(vb):
        x, y = va.get(digest, "none"), vb.get(digest, "none")
        if x != y:
            moved[f"{x} -> {y}"] = moved.get(f"{x} -> {y}", 0) + 1
    return {"counts": counts, "moved": dict(sorted(moved.items(), key=lambda kv: (-kv[1], kv[0]))),
            "kinds": list(kinds)}


def default_out(ctx: Ctx, a: str, b: str, fmt: str) -> Path:
    return ctx.ws.state_dir / "reports" / f"diff-{a}-{b}.{fmt}"


__all__ = ["FLIPS", "DiffReport", "FamilyRow", "build_diff", "config_diff", "default_out", "flip"]
