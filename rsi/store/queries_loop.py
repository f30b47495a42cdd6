"""The loop's bookkeeping: harness configs by digest, arms, budgets and attribution verdicts.

Configs and arms are content-addressed, so putting one twice is a no-op. A budget is charged with
one UPDATE (`spent = spent + amount`), so concurrent chargers never lose an increment. A verdict
is one row per (task, generation), revised in place as evidence arrives (DESIGN §7).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Literal, get_args

from sqlalchemy import update
from sqlmodel import Session, col, select

from rsi.core.arm import Arm
from rsi.core.errors import ConfigError, NotFoundError
from rsi.store.queries_base import StoreBase, check_choice
from rsi.store.tables import ArmRow, AttributionRow, BudgetRow, ConfigRow, JobRow, TrialRow, utcnow

ConfigOrigin = Literal["file", "search_space", "reflection", "manual", "fewshot"]
BudgetUnit = Literal["trials", "tokens", "minutes", "usd"]
AttributionKind = Literal["model", "task", "config", "infra"]


def arm_row(arm: Arm) -> ArmRow:
    return ArmRow(
        id=arm.id, agent=arm.agent, generation=arm.generation, config_digest=arm.config_digest, variant=arm.variant
    )


def put_arm_in(s: Session, arm: Arm) -> None:
    """Add an arm inside an open session unless it is there (used by put_arm and create_job)."""
    if s.get(ArmRow, arm.id) is None:
        s.add(arm_row(arm))


def _as_arm(row: ArmRow) -> Arm:
    return Arm(agent=row.agent, generation=row.generation, config_digest=row.config_digest, variant=row.variant)


class LoopQueries(StoreBase):
    """Configs, arms, budgets and attributions."""

    # configs ---------------------------------------------------------------------------------
    def put_config(
        self,
        digest: str,
        name: str,
        canonical_yaml: str,
        *,
        parent_digest: str | None = None,
        origin: ConfigOrigin = "file",
        source: str | None = None,
    ) -> ConfigRow:
        """Store a harness config under its digest. Idempotent: the first record of a digest stays."""
        check_choice("config origin", origin, get_args(ConfigOrigin))
        with self.session() as s:
            row = s.get(ConfigRow, digest)
            if row is None:
                row = ConfigRow(
                    digest=digest,
                    name=name,
                    canonical_yaml=canonical_yaml,
                    parent_digest=parent_digest,
                    origin=origin,
                    source=source,
                )
                s.add(row)
                s.commit()
            return row

    def get_config(self, digest: str) -> ConfigRow:
        """A config by digest or unique digest prefix."""
        with self.session() as s:
            row = s.get(ConfigRow, digest)
            if row is not None:
                return row
            rows = s.exec(select(ConfigRow).where(col(ConfigRow.digest).startswith(digest))).all()
            if len(rows) == 1:
                return rows[0]
            known = len(s.exec(select(ConfigRow.digest)).all())
        if rows:
            raise NotFoundError(f"config prefix '{digest}' is ambiguous: {len(rows)} of {known} known configs match")
        raise NotFoundError(f"unknown config '{digest}' ({known} known)")

    def list_configs(self) -> list[ConfigRow]:
        with self.session() as s:
            return list(s.exec(select(ConfigRow).order_by(col(ConfigRow.created_at), col(ConfigRow.digest))).all())

    # arms ------------------------------------------------------------------------------------
    def put_arm(self, arm: Arm) -> None:
        """Register an arm. Idempotent (its id covers every field)."""
        with self.session() as s:
            put_arm_in(s, arm)
            s.commit()

    def get_arm(self, arm_id: str) -> Arm:
        with self.session() as s:
            row = s.get(ArmRow, arm_id)
        if row is None:
            raise NotFoundError(f"unknown arm '{arm_id}'")
        return _as_arm(row)

    def arms_of_job(self, job_id: str) -> list[Arm]:
        """The job's arms in plan order, then any other arm its trials name (older jobs list none)."""
        with self.session() as s:
            job = s.get(JobRow, job_id)
            if job is None:
                raise NotFoundError(f"unknown job '{job_id}'")
            ids = job.arm_ids
            seen = set(ids)
            for arm_id in s.exec(
                select(TrialRow.arm_id).where(TrialRow.job_id == job_id).order_by(col(TrialRow.id))
            ).all():
                if arm_id is not None and arm_id not in seen:
                    ids.append(arm_id)
                    seen.add(arm_id)
            rows = {r.id: r for r in s.exec(select(ArmRow).where(col(ArmRow.id).in_(ids))).all()}
        return [_as_arm(rows[i]) for i in ids if i in rows]

    # budgets ---------------------------------------------------------------------------------
    def set_budget(self, job_id: str, unit: BudgetUnit, limit: float, phase: str = "all") -> BudgetRow:
        """Create a budget, or set a new limit on an existing one keeping what is spent (resume with more).

        The unit of an existing budget cannot change: what was spent is counted in it.
        """
        check_choice("budget unit", unit, get_args(BudgetUnit))
        if limit < 0:
            raise ValueError(f"budget limit must be >= 0; got {limit}")
        with self.session() as s:
            row = s.get(BudgetRow, (job_id, phase))
            if row is None:
                row = BudgetRow(job_id=job_id, phase=phase, unit=unit, limit=float(limit), spent=0.0)
            elif row.unit != unit:
                raise ConfigError(f"job {job_id} ({phase}) has a budget in {row.unit}, not {unit}")
            else:
                row.limit = float(limit)
                row.updated_at = utcnow()
            s.add(row)
            s.commit()
            return row

    def get_budget(self, job_id: str, phase: str = "all") -> BudgetRow | None:
        with self.session() as s:
            return s.get(BudgetRow, (job_id, phase))

    def charge_budget(self, job_id: str, amount: float, phase: str = "all") -> BudgetRow:
        """Add `amount` to what is spent (atomically, in SQL) and return the budget as it is now."""
        if amount < 0:
            raise ValueError(f"a budget charge must be >= 0; got {amount}")
        with self.session() as s:
            self._fence(s, job_id)
            result = s.exec(
                update(BudgetRow)
                .where(col(BudgetRow.job_id) == job_id, col(BudgetRow.phase) == phase)
                .values(spent=col(BudgetRow.spent) + float(amount), updated_at=utcnow())
            )
            if result.rowcount == 0:
                raise NotFoundError(f"job {job_id} has no budget for phase '{phase}'")
            s.commit()
            row = s.get(BudgetRow, (job_id, phase), populate_existing=True)
        assert row is not None
        return row

    # attributions ----------------------------------------------------------------------------
    def upsert_attribution(
        self,
        *,
        task_digest: str,
        task_name: str,
        generation: str,
        kind: AttributionKind,
        confidence: float,
        evidence: Sequence[str],
        reason: str,
        variant: str | None = None,
    ) -> AttributionRow:
        """Write the verdict for (task, generation): a new row, or a revision that keeps created_at."""
        check_choice("attribution kind", kind, get_args(AttributionKind))
        if not 0.0 <= confidence <= 1.0:
            raise ValueError(f"attribution confidence must be within [0, 1]; got {confidence}")
        with self.session() as s:
            row = s.exec(
                select(AttributionRow).where(
                    AttributionRow.task_digest == task_digest, AttributionRow.generation == generation
                )
            ).first()
            if row is None:
                row = AttributionRow(task_digest=task_digest, task_name=task_name, generation=generation, kind=kind,
                                     confidence=confidence, reason=reason)
            else:
                row.revised_at = utcnow()
            row.task_name = task_name
            row.kind = kind
            row.confidence = float(confidence)
            row.evidence_json = json.dumps(list(evidence))
            row.variant = variant
            row.reason = reason
            s.add(row)
            s.commit()
            return row

    def attributions(self, generation: str | None = None, kind: AttributionKind | None = None) -> list[AttributionRow]:
        stmt = select(AttributionRow)
        if generation is not None:
            stmt = stmt.where(AttributionRow.generation == generation)
        if kind is not None:
            stmt = stmt.where(AttributionRow.kind == kind)
        stmt = stmt.order_by(col(AttributionRow.generation), col(AttributionRow.task_name), col(AttributionRow.id))
        with self.session() as s:
            return list(s.exec(stmt).all())
