"""Discovery's executed checks: each stage is a child `run` job of the discover job (run by
rsi.loop.stages.ChildJobs), and each candidate's verdict is read from that job's trials.

- oracle: the reference solution passes every run (`discovery.oracle_runs`); a build failure, a
  failing oracle and a flaky one (passes, then fails) are each their own rejection;
- controls: `nop` and every known-wrong solution fail;
- probe: the generation's pass rate over K attempts, against the band (train candidates only: a valid
  holdout candidate is admitted on validity alone);
- admit: copy each admitted candidate's task into tasks/ and register it.
A trial that failed on infra decides nothing: the candidate stays where it was and the discover
job ends interrupted, so `--resume` re-runs exactly those trials (run_job keeps every attempt).
"""

from __future__ import annotations

import shutil
from collections import defaultdict
from pathlib import Path

from rsi.core.discover import in_band
from rsi.core.errors import ConfigError, RsiError
from rsi.core.trial import ErrorType, TrialStatus, is_infra
from rsi.loop.context import WorkspaceContext
from rsi.loop.stages import StageResult
from rsi.store.files import load_task
from rsi.store.tables import CandidateRow, TrialRow


def _by_task(trials: list[TrialRow]) -> dict[str, list[TrialRow]]:
    out: dict[str, list[TrialRow]] = defaultdict(list)
    for t in trials:
        out[t.task_name].append(t)
    return out


def _undecided(trials: list[TrialRow]) -> bool:
    return any(t.status != TrialStatus.DONE.value or is_infra(t.error_type) for t in trials)


def evaluate_oracle(ctx: WorkspaceContext, job_id: str, cands: list[CandidateRow], res: StageResult) -> None:
    store, by = ctx.store, _by_task(res.trials)
    for c in cands:
        ts = by.get(c.name, [])
        ids = [t.id for t in ts]
        if not ts or _undecided(ts):
            continue
        if any(t.error_type == ErrorType.ENVIRONMENT_BUILD_FAILED.value for t in ts):
            _reject(ctx, job_id, c, "build_failed", ts[0].error_message or "the image did not build", ids)
        elif all(t.passed for t in ts):
            store.update_candidate(job_id, c.name, state="checked", evidence=ids)
        elif any(t.passed for t in ts):
            _reject(ctx, job_id, c, "oracle_flaky", f"passed {sum(t.passed for t in ts)} of {len(ts)} runs", ids)
        else:
            why = next((t.error_type or f"reward {t.reward}" for t in ts), "")
            _reject(ctx, job_id, c, "oracle_failed", f"failed all {len(ts)} runs ({why})", ids)


def evaluate_controls(ctx: WorkspaceContext, job_id: str, cands: list[CandidateRow], res: StageResult) -> None:
    store, by = ctx.store, _by_task(res.trials)
    for c in cands:
        ts = by.get(c.name, [])
        ids = [t.id for t in ts]
        if not ts or _undecided(ts):
            continue
        nop = [t for t in ts if t.agent == "nop"]
        wrong = [t for t in ts if t.agent == "known_wrong" and t.passed]
        if any(t.passed for t in nop):
            _reject(ctx, job_id, c, "nop_passed", "doing nothing passed", ids)
        elif wrong:
            _reject(ctx, job_id, c, "known_wrong_passed",
                    "known-wrong solution(s) " + ", ".join(t.variant or "?" for t in wrong) + " passed", ids)
        else:
            store.update_candidate(job_id, c.name, state="valid", evidence=ids)


def probe_rate(trials: list[TrialRow]) -> tuple[float | None, int]:
    """Pass rate over finished, non-infra trials, and how many there were."""
    counted = [t for t in trials if t.status == TrialStatus.DONE.value and not is_infra(t.error_type)]
    if not counted:
        return None, 0
    return sum(t.passed for t in counted) / len(counted), len(counted)


def evaluate_probe(ctx: WorkspaceContext, job_id: str, cands: list[CandidateRow], res: StageResult,
                   band: tuple[float, float]) -> None:
    by = _by_task(res.trials)
    for c in cands:
        ts = by.get(c.name, [])
        if ts and not _undecided(ts):
            _place(ctx, job_id, c, ts, band, None)


def _place(ctx: WorkspaceContext, job_id: str, c: CandidateRow, ts: list[TrialRow], band: tuple[float, float],
           sibling_note: str | None) -> None:
    """Admit-ready, drop (above the band) or reject (below) `c` by the pass rate of probe trials `ts`: its own,
    or (`sibling_note` says so) its template's probed candidates', which then count as none of its own."""
    store = ctx.store
    rate, n = probe_rate(ts)
    assert rate is not None
    ids = [t.id for t in ts]
    own = n if sibling_note is None else 0
    where = in_band(rate, band)
    if where == "in":
        store.update_candidate(job_id, c.name, probe_pass_rate=rate, probe_trials=own, evidence=ids,
                               **({"detail": sibling_note} if sibling_note else {}))
    elif where == "above":
        detail = sibling_note or f"pass rate {rate:.2f} > {band[1]:g}"
        store.update_candidate(job_id, c.name, state="dropped", reason="above_band", probe_pass_rate=rate,
                               probe_trials=own, detail=detail, evidence=ids)
        _mark_task(ctx, c, "rejected", f"above_band: {sibling_note or f'pass rate {rate:.2f}'}")
    else:
        _reject(ctx, job_id, c, "below_band", sibling_note or f"pass rate {rate:.2f} < {band[0]:g}", ids)
        store.update_candidate(job_id, c.name, probe_pass_rate=rate, probe_trials=own)


def candidate_template(c: CandidateRow) -> str:
    """The template a staged candidate's task records (its own name when it records none)."""
    import tomllib

    try:
        meta = tomllib.loads((Path(c.stage_dir) / "task" / "task.toml").read_text()).get("metadata", {})
    except (OSError, ValueError):
        return f"task:{c.name}"
    return str(meta.get("rsi", {}).get("template") or f"task:{c.name}")


def split_by_template(cands: list[CandidateRow], per_template: int | None
                      ) -> tuple[list[CandidateRow], dict[str, list[CandidateRow]]]:
    """(the candidates to probe: the first `per_template` of each template by name; the others by template).
    None probes every candidate."""
    if per_template is None:
        return cands, {}
    by: dict[str, list[CandidateRow]] = {}
    for c in sorted(cands, key=lambda c: c.name):
        by.setdefault(candidate_template(c), []).append(c)
    probe = [c for group in by.values() for c in group[:per_template]]
    rest = {tpl: group[per_template:] for tpl, group in by.items() if group[per_template:]}
    return probe, rest


def evaluate_by_template(ctx: WorkspaceContext, job_id: str, rest: dict[str, list[CandidateRow]],
                         trials: list[TrialRow], band: tuple[float, float]) -> None:
    """Place each unprobed candidate in the band by the pooled probe rate of its template's probed candidates;
    a template none of whose candidates finished its probe leaves its others undecided (a resume probes them)."""
    names = {c.name: candidate_template(c) for c in ctx.store.candidates(job_id)}
    pooled: dict[str, list[TrialRow]] = {}
    for t in trials:
        if t.task_name in names:
            pooled.setdefault(names[t.task_name], []).append(t)
    for tpl, cands in rest.items():
        ts = pooled.get(tpl, [])
        if not ts or _undecided(ts):
            continue
        rate, n = probe_rate(ts)
        note = f"by template {tpl}: pass rate {rate:.2f} over {n} probe trial(s) of its probed candidates"
        for c in cands:
            _place(ctx, job_id, c, ts, band, note)


def _reject(ctx: WorkspaceContext, job_id: str, c: CandidateRow, reason: str, detail: str, ids: list[str]) -> None:
    ctx.store.update_candidate(job_id, c.name, state="rejected", reason=reason, detail=detail[:2000], evidence=ids)
    _mark_task(ctx, c, "rejected", f"{reason}: {detail}"[:500])


def _mark_task(ctx: WorkspaceContext, c: CandidateRow, state: str, reason: str) -> None:
    if c.task_digest and any(r.digest == c.task_digest for r in ctx.store.task_rows(state="candidate")):
        ctx.store.retire_task(c.task_digest, reason, state=state)


def awaits_probe(c: CandidateRow) -> bool:
    """A valid train candidate not probed yet (a holdout candidate is admitted on validity alone)."""
    return c.state == "valid" and c.split != "holdout" and c.probe_pass_rate is None


def admit(ctx: WorkspaceContext, job_id: str) -> None:
    """Copy each admitted candidate's task into tasks/ and register it with its provenance."""
    store = ctx.store
    ctx.ws.tasks_dir.mkdir(parents=True, exist_ok=True)
    for c in store.candidates(job_id, "valid"):
        if awaits_probe(c):
            continue
        dest = ctx.ws.tasks_dir / c.name
        src = Path(c.stage_dir) / "task"
        if dest.exists():
            if load_task(dest).digest != c.task_digest:
                raise ConfigError(f"{dest} exists with other content; move it away and resume discover {job_id}")
        else:
            tmp = dest.with_name(f".{c.name}.tmp")
            shutil.rmtree(tmp, ignore_errors=True)
            shutil.copytree(src, tmp)
            tmp.rename(dest)
        task = load_task(dest)
        if task.digest != c.task_digest:
            raise RsiError(f"admitted task {c.name} changed while it was copied ({task.digest[:12]} != "
                           f"{(c.task_digest or '')[:12]})")
        store.admit_task(task, discover_job=job_id, probe_pass_rate=c.probe_pass_rate,
                         probe_trials=c.probe_trials)
        store.update_candidate(job_id, c.name, state="admitted")
