"""The loop's store: configs, arms, budgets, verdicts, generation events, trial evidence, and the holdout seal."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from rsi.core.arm import Arm, make_trial_id
from rsi.core.errors import ConfigError, NotFoundError
from rsi.core.generation import BaseModelRef, GenerationManifest, GenerationState, HarnessRef
from rsi.core.trial import ErrorType, Timings, TrialResult, TrialStatus, Usage
from rsi.store.repo import READERS, Store
from rsi.store.tables import TaskRow, TrialRow

HARNESS = Arm(agent="harness", generation="gen-0000", config_digest="cfg-a")
VARIANT = Arm(agent="harness", generation="gen-0000", config_digest="cfg-b", variant="sampling.temperature=0.2")


@pytest.fixture
def store(tmp_path: Path) -> Iterator[Store]:
    s = Store(f"sqlite:///{tmp_path / 'rsi.db'}")
    yield s
    s.close()


def _row(job_id: str, task: str, arm: Arm, attempt: int = 1, split: str = "train") -> TrialRow:
    return TrialRow(id=make_trial_id(job_id, task, arm, attempt), job_id=job_id, task_name=task,
                    task_digest=f"d-{task}", generation=arm.generation, agent=arm.agent, attempt=attempt,
                    status=TrialStatus.PENDING.value, trial_dir=f"/tmp/{job_id}/{task}.{attempt}", arm_id=arm.id,
                    variant=arm.variant, harness_config_digest=arm.config_digest, split=split)


def _plan(store: Store, job_id: str, rows: list[TrialRow], arms: list[Arm], phase: Any = "expand") -> None:
    store.create_job(job_id, agent="harness", generation="gen-0000", harness_config_digest="cfg-a", attempts=1,
                     concurrency=1, task_paths=["/tasks"], tasks_fingerprint="fp", trials=rows, phase=phase,
                     arms=arms)


def _result(row: TrialRow, **kw: object) -> TrialResult:
    fields: dict[str, object] = dict(trial_id=row.id, job_id=row.job_id, task=row.task_name,
                                     task_digest=row.task_digest, attempt=row.attempt, agent=row.agent,
                                     generation=row.generation, arm_id=row.arm_id, variant=row.variant,
                                     harness_config_digest=row.harness_config_digest, trial_dir=row.trial_dir)
    fields.update(kw)
    return TrialResult(**fields)  # type: ignore[arg-type]


def _manifest(gen_id: str = "gen-0001", state: GenerationState = GenerationState.CANDIDATE) -> GenerationManifest:
    return GenerationManifest(id=gen_id, parent="gen-0000", state=state, contract="1.0.0",
                              base_model=BaseModelRef(id="base"), harness_config=HarnessRef(name="h", digest="cfg-a"))


# configs and arms ------------------------------------------------------------------------------
def test_configs_are_idempotent_and_found_by_prefix(store: Store) -> None:
    first = store.put_config("abc123", "default", "name: default\n", source="harness_configs/default.yaml")
    again = store.put_config("abc123", "renamed", "other", origin="manual")
    assert (again.name, again.origin, again.created_at) == ("default", "file", first.created_at)
    store.put_config("abd999", "variant", "name: default\n", parent_digest="abc123", origin="search_space",
                     source="loop.max_turns=8")
    assert store.get_config("abc").digest == "abc123"
    assert store.get_config("abd999").parent_digest == "abc123"
    with pytest.raises(NotFoundError, match=r"ambiguous: 2 of 2 known"):
        store.get_config("ab")
    with pytest.raises(NotFoundError, match=r"unknown config 'zz' \(2 known\)"):
        store.get_config("zz")
    assert [c.digest for c in store.list_configs()] == ["abc123", "abd999"]
    with pytest.raises(ValueError, match="origin"):
        store.put_config("x", "x", "x", origin="guess")  # type: ignore[arg-type]


def test_arms_are_stored_with_the_job_in_plan_order(store: Store) -> None:
    store.put_arm(HARNESS)
    store.put_arm(HARNESS)
    assert store.get_arm(HARNESS.id) == HARNESS
    with pytest.raises(NotFoundError, match="unknown arm"):
        store.get_arm("nope")
    _plan(store, "j", [_row("j", "t0", VARIANT), _row("j", "t0", HARNESS)], [VARIANT, HARNESS, VARIANT])
    job = store.get_job("j")
    assert (job.phase, job.arm_ids) == ("expand", [VARIANT.id, HARNESS.id])
    assert store.arms_of_job("j") == [VARIANT, HARNESS]
    t = store.get_trial(make_trial_id("j", "t0", VARIANT, 1))
    assert (t.arm_id, t.variant, t.split) == (VARIANT.id, "sampling.temperature=0.2", "train")
    with pytest.raises(ValueError, match="phase"):
        _plan(store, "k", [], [], phase="explore")


# budgets ---------------------------------------------------------------------------------------
def test_budget_create_charge_and_raise(store: Store) -> None:
    assert store.get_budget("j") is None
    with pytest.raises(NotFoundError, match="no budget"):
        store.charge_budget("j", 1)
    b = store.set_budget("j", "trials", 3)
    assert (b.unit, b.limit, b.spent, b.phase, b.exhausted) == ("trials", 3.0, 0.0, "all", False)
    store.charge_budget("j", 2)
    b = store.charge_budget("j", 1)
    assert (b.spent, b.remaining, b.exhausted) == (3.0, 0.0, True)
    b = store.set_budget("j", "trials", 10)
    assert (b.limit, b.spent, b.remaining) == (10.0, 3.0, 7.0), "raising the limit keeps what is spent"
    store.set_budget("j", "tokens", 500, phase="expand")
    assert store.charge_budget("j", 120.5, phase="expand").spent == 120.5
    got = store.get_budget("j")
    assert got is not None and got.spent == 3.0, "phases are separate budgets"
    with pytest.raises(ConfigError, match="in trials, not usd"):
        store.set_budget("j", "usd", 1)
    with pytest.raises(ValueError):
        store.set_budget("j", "parsecs", 1)  # type: ignore[arg-type]
    with pytest.raises(ValueError):
        store.charge_budget("j", -1)


# attributions ----------------------------------------------------------------------------------
def test_attribution_upsert_revises_in_place(store: Store) -> None:
    first = store.upsert_attribution(task_digest="d0", task_name="t0", generation="gen-0000", kind="model",
                                     confidence=0.6, evidence=["a", "b"], reason="variants all fail")
    assert first.revised_at is None and first.evidence == ["a", "b"]
    store.upsert_attribution(task_digest="d1", task_name="t1", generation="gen-0000", kind="task",
                             confidence=1.0, evidence=["o1"], reason="oracle fails")
    rev = store.upsert_attribution(task_digest="d0", task_name="t0", generation="gen-0000", kind="config",
                                   confidence=0.9, evidence=["a", "b", "c"], reason="variant solves it",
                                   variant="loop.max_turns=8")
    assert (rev.id, rev.created_at) == (first.id, first.created_at)
    assert rev.revised_at is not None and rev.kind == "config" and rev.variant == "loop.max_turns=8"
    assert [a.task_name for a in store.attributions()] == ["t0", "t1"]
    assert [a.evidence for a in store.attributions(kind="config")] == [["a", "b", "c"]]
    assert store.attributions(generation="gen-0001") == []
    with pytest.raises(ValueError, match="kind"):
        store.upsert_attribution(task_digest="d0", task_name="t0", generation="g", kind="luck",  # type: ignore[arg-type]
                                 confidence=0.5, evidence=[], reason="")


# generation events -----------------------------------------------------------------------------
def test_generation_state_change_writes_an_event(store: Store) -> None:
    store.put_generation(_manifest())
    ev = store.set_generation_state("gen-0001", GenerationState.PROMOTED, "gates passed")
    assert ev is not None and (ev.from_state, ev.to_state, ev.reason) == ("candidate", "promoted", "gates passed")
    assert store.get_generation("gen-0001").state == GenerationState.PROMOTED, "the manifest follows the row"
    assert store.set_generation_state("gen-0001", "promoted", "again") is None
    store.set_generation_state("gen-0001", "superseded", "rollback")
    events = store.generation_events("gen-0001")
    assert [(e.from_state, e.to_state, e.reason) for e in events] == [
        (None, "candidate", "registered"), ("candidate", "promoted", "gates passed"),
        ("promoted", "superseded", "rollback"),
    ]
    store.put_generation(_manifest(state=GenerationState.SUPERSEDED))  # rewriting, same state: no event
    assert len(store.generation_events("gen-0001")) == 3
    with pytest.raises(NotFoundError):
        store.set_generation_state("gen-0099", "promoted", "x")
    with pytest.raises(ValueError):
        store.set_generation_state("gen-0001", "famous", "x")


# trial evidence and infra attempts -------------------------------------------------------------
def test_record_trial_persists_every_evidence_field(store: Store) -> None:
    row = _row("j", "t0", VARIANT)
    _plan(store, "j", [row], [VARIANT])
    r = _result(row, reward=0.0, rewards={"reward": 0.0, "tests": 0.5}, passed=False,
                error_type=ErrorType.TAMPER_DETECTED, changed_paths=["/app/x.py", "/app/json.py"],
                tampered_paths=["/app/json.py"], tamper_reasons=["/app/json.py shadows json"],
                integrity="snapshot", widened_roots=["/srv"], verifier_exit_code=1, turns=7,
                timings=Timings(model_queue=1.5, snapshot=0.25, total=9.0), usage=Usage(prompt_tokens=10),
                extra={"infra_attempts": [{"error_type": "sandbox_error", "message": "daemon gone"}]})
    store.record_trial(r)
    store.record_trial(r)
    t = store.get_trial(row.id)
    assert t.rewards == {"reward": 0.0, "tests": 0.5}
    assert (t.changed_paths, t.tampered_paths, t.tamper_reasons) == (
        ["/app/x.py", "/app/json.py"], ["/app/json.py"], ["/app/json.py shadows json"])
    assert (t.integrity, t.widened_roots, t.verifier_exit_code, t.turns) == ("snapshot", ["/srv"], 1, 7)
    assert (t.t_queue, t.t_snapshot, t.t_total, t.prompt_tokens) == (1.5, 0.25, 9.0, 10)
    assert (t.arm_id, t.variant, t.split, t.error_type) == (VARIANT.id, VARIANT.variant, "train", "tamper_detected")
    assert t.infra_attempts == [{"error_type": "sandbox_error", "message": "daemon gone"}], "idempotent"


def test_infra_attempts_accumulate_and_the_trial_stays_rerunnable(store: Store) -> None:
    row = _row("j", "t0", HARNESS)
    _plan(store, "j", [row], [HARNESS])
    store.mark_running(row.id)
    store.record_infra_attempt(row.id, ErrorType.SANDBOX_ERROR, "node lost")
    store.record_infra_attempt(row.id, "model_unavailable", "endpoint 503")
    t = store.get_trial(row.id)
    assert t.status == "pending" and [t.id for t in store.unfinished_trials("j")] == [row.id]
    assert [a["error_type"] for a in t.infra_attempts] == ["sandbox_error", "model_unavailable"]
    assert all("at" in a for a in t.infra_attempts)
    res = _result(row, reward=1.0, passed=True,
                  extra={"infra_attempts": [{"error_type": "sandbox_error", "message": "retry 1"}]})
    store.record_trial(res)
    store.record_trial(res)
    t = store.get_trial(row.id)
    assert t.status == "done"
    assert [a["message"] for a in t.infra_attempts] == ["node lost", "endpoint 503", "retry 1"]
    with pytest.raises(ValueError):
        store.record_infra_attempt(row.id, "solar_flare", "?")


# the holdout seal ------------------------------------------------------------------------------
def _sealed_job(store: Store) -> tuple[TrialRow, TrialRow]:
    train, hold = _row("j", "tr", HARNESS), _row("j", "ho", HARNESS, split="holdout")
    _plan(store, "j", [train, hold], [HARNESS])
    for row in (train, hold):
        store.record_trial(_result(row, reward=1.0, passed=True))  # the result does not say holdout
    return train, hold


def test_holdout_trials_are_sealed_from_every_reader_but_promote_and_diff(store: Store) -> None:
    train, hold = _sealed_job(store)
    assert store.get_trial(hold.id).split == "holdout", "a planned holdout row stays holdout"
    for reader in ("discover", "expand", "update", "run"):
        assert [t.id for t in store.outcomes(reader)] == [train.id], reader  # type: ignore[arg-type]
        assert store.reusable_trials(reader, hold.task_digest, "gen-0000", "cfg-a") == []  # type: ignore[arg-type]
    for reader in ("promote", "diff"):
        assert {t.id for t in store.outcomes(reader)} == {train.id, hold.id}  # type: ignore[arg-type]
        assert [t.id for t in store.reusable_trials(reader, hold.task_digest, "gen-0000", "cfg-a")] == [hold.id]  # type: ignore[arg-type]
    assert {t.id for t in store.trials("j")} == {train.id, hold.id}, "a job's own listing shows everything"
    assert set(READERS) == {"discover", "expand", "update", "promote", "diff", "run"}
    with pytest.raises(ValueError, match="unknown reader"):
        store.outcomes("peek")  # type: ignore[arg-type]


def test_a_holdout_task_seals_its_trials_even_if_the_row_says_train(store: Store) -> None:
    train, _hold = _sealed_job(store)
    with store.session() as s:
        s.add(TaskRow(digest=train.task_digest, name="tr", path="/tasks/tr", family="f", split="holdout"))
        s.commit()
    assert store.outcomes("expand") == []
    assert len(store.outcomes("promote")) == 2


def test_outcome_filters(store: Store) -> None:
    rows = [_row("j", "t0", HARNESS), _row("j", "t1", HARNESS), _row("j", "t0", VARIANT)]
    _plan(store, "j", rows, [HARNESS, VARIANT])
    store.record_trial(_result(rows[0], reward=1.0, passed=True))
    store.record_trial(_result(rows[2], reward=0.0))
    assert [t.id for t in store.outcomes("expand", config_digest="cfg-b")] == [rows[2].id]
    assert [t.id for t in store.outcomes("expand", task_digests=["d-t1"])] == []
    assert [t.id for t in store.outcomes("expand", task_digests=["d-t1"], done_only=False)] == [rows[1].id]
    assert len(store.outcomes("expand", generation="gen-0000", agent="harness")) == 2
    assert store.outcomes("expand", generation="gen-0001") == []
    assert store.outcomes("expand", agent="oracle") == []


def test_reusable_trials_exclude_infra_errors_other_configs_and_unfinished(store: Store) -> None:
    ok, infra, other_cfg = _row("j", "t0", HARNESS, 1), _row("j", "t0", HARNESS, 2), _row("j", "t0", VARIANT, 1)
    failed, pending = _row("j", "t0", HARNESS, 3), _row("j", "t0", HARNESS, 4)
    _plan(store, "j", [ok, infra, other_cfg, failed, pending], [HARNESS, VARIANT])
    store.record_trial(_result(ok, reward=1.0, passed=True))
    store.record_trial(_result(infra, error_type=ErrorType.SANDBOX_ERROR))
    store.record_trial(_result(other_cfg, reward=1.0, passed=True))
    store.record_trial(_result(failed, reward=0.0, error_type=ErrorType.AGENT_TIMEOUT))
    got = store.reusable_trials("expand", "d-t0", "gen-0000", "cfg-a")
    assert [t.id for t in got] == [ok.id, failed.id], "a model failure is evidence; an infra error is not"
    assert [t.id for t in store.reusable_trials("expand", "d-t0", "gen-0000", "cfg-b")] == [other_cfg.id]
    assert store.reusable_trials("expand", "d-t0", "gen-0001", "cfg-a") == []
    assert store.reusable_trials("expand", "d-t0", "gen-0000", "cfg-a", agent="oracle") == []
