"""What each run reports, made from the loop's own outcomes as plain data (each phase outcome's `as_json()` and
the cycle job's recorded phase info), so this package needs nothing from the loop.

- the cycle: params (generation, parent, base model, adapter and config digests, contract version, budget and its
  split), the decision as a tag, the wall time;
- discover: candidates, admitted, holdout admitted;
- expand: coverage, baseline rate, trials, spend per budget phase, and per config in search order (step = its
  place) its pass rate and the best coverage so far;
- update: training loss, KL and validation log-prob per step, log-prob before/after, samples, throughput; params
  name the candidate, its adapter and config digests; the candidate's manifest is an artifact;
- promote: the gated rates, delta and p-values, each holdout part's and the suite's, each gate (1 pass, 0 fail),
  the sequential test's p per look (step = look); the decision as a tag."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from rsi.core.generation import GenerationManifest
from rsi.track.base import Param, RunRecord


def _as_json(result: Any) -> dict[str, Any]:
    if result is None:
        return {}
    if isinstance(result, Mapping):
        return dict(result)
    return dict(result.as_json()) if hasattr(result, "as_json") else {}


def _num(x: Any) -> float | None:
    """A number to plot (a bool as 0/1); anything else (None, text) is not a metric."""
    return float(x) if isinstance(x, int | float) else None


def _amount(x: float) -> Param:
    """A budget as written: 100, not 100.0."""
    return int(x) if float(x).is_integer() else round(float(x), 3)


def generation_params(m: GenerationManifest, prefix: str = "") -> dict[str, Param]:
    """A generation's identity: id, parent, base model, adapter digest(s), harness config digest, contract."""
    adapters = ",".join(f"{label}:{ref.sha256[:16]}" for label, ref in m.adapters.items()) or "none"
    return {f"{prefix}generation": m.id, f"{prefix}parent": m.parent or "none", f"{prefix}base_model": m.base_model.id,
            f"{prefix}base_model_digest": m.base_model.digest or "none", f"{prefix}adapter_digest": adapters,
            f"{prefix}harness_config": m.harness_config.name, f"{prefix}config_digest": m.harness_config.digest,
            f"{prefix}contract_version": m.contract}


def cycle_start(job_id: str, gen: GenerationManifest, split: Mapping[str, float]) -> RunRecord:
    rec = RunRecord(params={"cycle_job": job_id, **generation_params(gen),
                            "budget": _amount(sum(split.values())),
                            **{f"budget_{k}": _amount(v) for k, v in split.items()}})
    rec.tags = {"rsi.kind": "cycle", "rsi.generation": gen.id}
    return rec


def cycle_end(outcome: Any) -> RunRecord:
    """The decision (promoted | rejected | no_candidate | stopped) and the wall time."""
    out = _as_json(outcome)
    decision = out.get("verdict") or ("no_candidate" if (out.get("phases") or {}).get("update", {}).get("status")
                                      == "no_candidate" else "stopped" if out.get("stopped") else "none")
    rec = RunRecord(tags={"decision": str(decision)})
    if out.get("candidate"):
        rec.tags["rsi.candidate"] = str(out["candidate"])
    if out.get("stopped"):
        rec.tags["stopped"] = str(out["stopped"])[:500]
    rec.metric("wall_sec", out.get("wall_sec"))
    return rec


def phase(name: str, info: Mapping[str, Any], result: Any, root: Path | None = None) -> RunRecord:
    """The record of one phase from its recorded info (the cycle job's `phases.<name>`) and its outcome."""
    make = {"discover": _discover, "expand": _expand, "update": _update, "promote": _promote}[name]
    rec = make(dict(info), _as_json(result), root)
    rec.tags = {"rsi.kind": "phase", "rsi.phase": name, "status": str(info.get("status", "done")), **rec.tags}
    job = info.get("job") or info.get("run") or _as_json(result).get("job_id") or _as_json(result).get("run_id")
    if job:
        rec.params.setdefault(f"{name}_job", str(job))
    return rec


def _discover(info: dict[str, Any], out: dict[str, Any], root: Path | None) -> RunRecord:
    rec = RunRecord()
    for k in ("candidates", "admitted", "holdout", "reserve"):
        rec.metric(k, _num(info.get(k)))
    if not info and out:  # `rsi discover` on its own: count from the outcome
        cands = out.get("candidates") or []
        rec.metric("candidates", len(cands))
        rec.metric("admitted", sum(1 for c in cands if isinstance(c, Mapping) and c.get("state") == "admitted"))
    return rec


def _expand(info: dict[str, Any], out: dict[str, Any], root: Path | None) -> RunRecord:
    rec = RunRecord()
    if info.get("skipped"):
        rec.tags["skipped"] = str(info["skipped"])[:500]
    cov = out.get("coverage") or {}
    rec.metric("coverage_rate", _num(cov.get("rate")))
    rec.metric("coverage_solved", _num(cov.get("solved")))
    rec.metric("tasks", _num(out.get("tasks")))
    rec.metric("baseline_rate", _num((out.get("baseline") or {}).get("rate", info.get("baseline_rate"))))
    rec.metric("best_rate", _num((out.get("best") or {}).get("rate")))
    rec.metric("trials", _num(out.get("trials", info.get("trials"))))
    rec.metric("infra_trials", _num(out.get("infra_trials")))
    budget = out.get("budget") or {}
    spent = budget.get("spent") or {}
    for k, v in spent.items():
        rec.metric(f"spend/{k}", _num(v))
    if spent:
        rec.metric("spend/total", sum(float(v) for v in spent.values()))
    rec.metric("budget_limit", _num(budget.get("limit")))
    best = 0
    for i, line in enumerate(out.get("configs") or [], 1):  # search order: step = the config's place
        rec.metric("config/rate", _num(line.get("rate")), i)
        best = max(best, int(line.get("tasks_solved") or 0))
        rec.metric("config/best_tasks_solved", best, i)
    for k, v in (out.get("attribution") or {}).items():
        rec.metric(f"attribution/{k}", _num(v))
    for k, v in (out.get("integrity") or info.get("integrity") or {}).items():
        rec.metric(f"integrity/{k}", _num(v))
    adopted = out.get("adopted") or {}
    if adopted.get("name") or info.get("adopted"):
        rec.tags["adopted"] = str(adopted.get("name") or info.get("adopted"))
    rec.params["strategy"] = str(out.get("strategy") or "none")
    return rec


def _update(info: dict[str, Any], out: dict[str, Any], root: Path | None) -> RunRecord:
    rec = RunRecord()
    t = out.get("training") or {}
    rec.curve("train/loss", t.get("loss_curve") or [])
    rec.curve("train/kl", t.get("kl_curve") or [])
    val = t.get("validation") or {}
    for point in val.get("curve") or []:  # [[step, mean log-prob of the held-out completions], ...]
        if isinstance(point, list | tuple) and len(point) == 2:
            rec.metric("train/val_logprob", _num(point[1]), int(point[0]))
    for k in ("logprob_before", "logprob_after", "logprob_delta", "samples", "sft_samples", "pg_samples", "steps",
              "kl_last", "loss_first", "loss_last"):
        rec.metric(f"train/{k}", _num(t.get(k)))
    for k in ("samples_per_sec", "tokens_per_sec", "train_sec"):
        rec.metric(f"throughput/{k}", _num((t.get("throughput") or {}).get(k)))
    sel = out.get("selection") or {}
    rec.metric("accepted", _num(sel.get("accepted", info.get("accepted"))))
    for k, v in (out.get("refused") or {}).items():
        rec.metric(f"refused/{k}", _num(v))
    rec.params.update({"backend": str(out.get("backend") or "none"), "objective": str(out.get("objective") or "none")})
    cand = out.get("candidate") or info.get("candidate")
    if cand:
        rec.params["candidate"] = str(cand)
    adapter = out.get("adapter") or {}
    if adapter.get("sha256"):
        rec.params["candidate_adapter_digest"] = str(adapter["sha256"])[:16]
    ds = out.get("dataset") or {}
    if ds.get("digest"):
        rec.params["dataset_digest"] = str(ds["digest"])
    if out.get("manifest_path"):
        p = Path(out["manifest_path"])
        rec.artifacts.append(p if p.is_absolute() or root is None else root / p)
    if info.get("status") == "no_candidate" or (out and not cand):
        rec.tags["decision"] = "no_candidate"
    return rec


def _part_metrics(rec: RunRecord, prefix: str, d: Mapping[str, Any]) -> None:
    for k in ("parent", "candidate", "delta", "p_value", "ni_p_value", "tasks", "units"):
        rec.metric(f"{prefix}/{k}", _num(d.get(k)))


def _promote(info: dict[str, Any], out: dict[str, Any], root: Path | None) -> RunRecord:
    rec = RunRecord()
    v = out.get("verdict") or {}
    for k in ("parent_rate", "candidate_rate", "delta", "p_value", "task_delta", "task_p_value", "n_tasks",
              "n_units", "bound"):
        rec.metric(k, _num(v.get(k, info.get(k))))
    for part in v.get("parts") or []:
        _part_metrics(rec, f"part/{part.get('part')}", part)
    if v.get("suite"):
        _part_metrics(rec, "suite", v["suite"])
    if v.get("in_template"):
        _part_metrics(rec, "in_template", v["in_template"])
    for g in v.get("gates") or []:
        rec.metric(f"gate/{g.get('name')}", 1.0 if g.get("passed") else 0.0)
    for look in (v.get("sequential") or {}).get("history") or []:
        rec.metric("sequential/p_value", _num(look.get("p_value")), int(look.get("look") or 0))
        rec.metric("sequential/bound", _num(look.get("bound")), int(look.get("look") or 0))
    for k, x in (out.get("trials") or {}).items():
        rec.metric(f"trials/{k}", _num(x))
    if out.get("candidate"):
        rec.params.update({"candidate": str(out["candidate"]), "parent": str(out.get("parent"))})
    passed = v.get("passed", info.get("passed"))
    if passed is not None:
        rec.tags["decision"] = "promoted" if passed else "rejected"
        failing = v.get("failing", info.get("failing")) or []
        if failing:
            rec.tags["failing_gates"] = ",".join(map(str, failing))
    return rec


__all__ = ["cycle_end", "cycle_start", "generation_params", "phase"]
