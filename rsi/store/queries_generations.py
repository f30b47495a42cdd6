"""Generations, their state changes, and the task pool.

A generation row mirrors its manifest (the row's `state` and the manifest's `state` always agree).
Every state a generation enters, registration included, appends a `generation_events` row with
the state it left, so promotion and rollback leave an audit trail. Rows are updated in place,
never deleted and re-added: events point at them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from sqlalchemy.exc import IntegrityError
from sqlmodel import Session, col, select

from rsi.core.errors import NotFoundError
from rsi.core.generation import GenerationManifest, GenerationState
from rsi.core.task import Task
from rsi.store.queries_base import StoreBase
from rsi.store.tables import GenerationEventRow, GenerationRow, TaskRow


def _event(s: Session, gen_id: str, from_state: str | None, to_state: str, reason: str) -> GenerationEventRow:
    ev = GenerationEventRow(generation=gen_id, from_state=from_state, to_state=to_state, reason=reason)
    s.add(ev)
    return ev


class GenerationQueries(StoreBase):
    """Generation manifests, state transitions with their events, and tasks."""

    def put_generation(self, m: GenerationManifest) -> None:
        """Register or rewrite a generation from its manifest; a new state is recorded as an event."""
        with self.session() as s:
            row = s.get(GenerationRow, m.id)
            before = row.state if row is not None else None
            fields: dict[str, Any] = {
                "parent": m.parent,
                "state": m.state.value,
                "contract": m.contract,
                "base_model_id": m.base_model.id,
                "harness_config_name": m.harness_config.name,
                "harness_config_digest": m.harness_config.digest,
                "serve_name": m.serve_name(),
                "manifest_json": m.model_dump_json(),
            }
            if row is None:
                row = GenerationRow(id=m.id, **fields)
            else:
                row.sqlmodel_update(fields)
            s.add(row)
            if before != row.state:
                s.flush()
                _event(s, m.id, before, row.state, "registered" if before is None else "manifest rewritten")
            s.commit()

    def get_generation(self, gen_id: str) -> GenerationManifest:
        with self.session() as s:
            row = s.get(GenerationRow, gen_id)
        if row is None:
            known = ", ".join(g.id for g in self.list_generations()) or "(none)"
            raise NotFoundError(f"unknown generation '{gen_id}'; known: {known}")
        return GenerationManifest.model_validate_json(row.manifest_json)

    def list_generations(self) -> list[GenerationManifest]:
        with self.session() as s:
            rows = s.exec(select(GenerationRow).order_by(col(GenerationRow.id))).all()
        return [GenerationManifest.model_validate_json(r.manifest_json) for r in rows]

    def current_generation(self) -> GenerationManifest:
        """The newest promoted generation, else the newest one (gen-0000 on a new workspace)."""
        gens = self.list_generations()
        if not gens:
            raise NotFoundError("no generation registered; run `rsi init` first")
        promoted = [g for g in gens if g.state.value == "promoted"]
        return (promoted or gens)[-1]

    def set_generation_state(
        self, gen_id: str, to_state: GenerationState | str, reason: str
    ) -> GenerationEventRow | None:
        """Move a generation to `to_state` (row and manifest) and append the event, in one transaction.

        Returns the event; None when the generation is already in that state (nothing happened,
        so nothing is recorded). The manifest file under generations/ is the caller's to rewrite.
        """
        state = GenerationState(to_state)
        with self.session() as s:
            row = s.get(GenerationRow, gen_id)
            if row is None:
                raise NotFoundError(f"unknown generation '{gen_id}'")
            if row.state == state.value:
                return None
            before = row.state
            manifest = GenerationManifest.model_validate_json(row.manifest_json)
            row.state = state.value
            row.manifest_json = manifest.model_copy(update={"state": state}).model_dump_json()
            s.add(row)
            ev = _event(s, gen_id, before, state.value, reason)
            s.commit()
            return ev

    def generation_events(self, gen_id: str | None = None) -> list[GenerationEventRow]:
        """State changes, oldest first: one generation's, or every generation's when gen_id is None."""
        stmt = select(GenerationEventRow)
        if gen_id is not None:
            stmt = stmt.where(GenerationEventRow.generation == gen_id)
        with self.session() as s:
            return list(s.exec(stmt.order_by(col(GenerationEventRow.id))).all())

    def put_tasks(self, tasks: Iterable[Task], state: str = "active") -> None:
        """Register tasks by digest (a task already known keeps its row); discovery registers its
        candidates as `candidate` so they never count as pool tasks before they are admitted."""
        tasks = list(tasks)
        for again in (True, False):  # two drivers on PostgreSQL may add the same task at once: the loser retries
            try:
                self._put_tasks(tasks, state)
                return
            except IntegrityError:
                if not again:
                    raise

    def _put_tasks(self, tasks: list[Task], state: str) -> None:
        with self.session() as s:
            for t in tasks:
                if s.get(TaskRow, t.digest) is None:
                    s.add(
                        TaskRow(
                            digest=t.digest,
                            name=t.name,
                            path=t.path,
                            family=t.family,
                            split=t.split,
                            difficulty=t.spec.metadata.rsi.difficulty,
                            state=state,
                        )
                    )
            s.commit()
