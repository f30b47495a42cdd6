"""The executor boundary: where trial logic runs (DESIGN §11).

An executor takes `TrialSpec`s (plain data) at any time, runs them at most `concurrency` at a time,
and hands back `TrialEvent`s (plain data) as trials start and finish. Before it starts each trial it
asks the job's budget gate; a trial the gate refuses stays queued (`blocked`). `cancel()` stops
everything promptly without a busy loop. Workers return results and artifacts; the driver alone
writes the store, so an executor never touches it. `local` (threads of this process) is one
provider; a Ray provider can follow behind the same protocol because nothing here is a live object.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal, Protocol

from rsi.core.arm import TrialSpec
from rsi.core.model import RsiModel
from rsi.core.trial import TrialResult

EventKind = Literal["started", "finished", "cancelled", "failed"]


class TrialEvent(RsiModel):
    """What the executor reports: a trial started, finished (with its result), was cancelled before
    it finished, or failed with an unexpected error (a bug; `error` holds the traceback)."""

    kind: EventKind
    spec: TrialSpec
    result: TrialResult | None = None
    error: str | None = None


# The budget gate: may this trial start now? Called once per trial, just before it starts.
Gate = Callable[[TrialSpec], bool]


class Executor(Protocol):
    name: str

    def submit(self, spec: TrialSpec) -> None:
        """Queue one trial; it starts when a slot is free and the gate allows it."""
        ...

    def next_event(self, timeout: float | None = None) -> TrialEvent | None:
        """The next event, waiting up to `timeout` seconds (None if nothing happened)."""
        ...

    def busy(self) -> bool:
        """Whether any trial is running or may still start (queued and not blocked by the gate)."""
        ...

    def blocked(self) -> list[TrialSpec]:
        """Queued trials the gate refused (the budget is spent)."""
        ...

    def release(self) -> None:
        """Ask the gate again for blocked trials (after the budget was raised)."""
        ...

    def cancel(self, grace: float = 10.0) -> list[TrialSpec]:
        """Stop: drop the queue, stop running trials, wait up to `grace` seconds for them to unwind.
        Returns the specs that never finished."""
        ...
