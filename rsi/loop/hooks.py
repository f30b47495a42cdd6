"""The callbacks the CLI hooks into while a phase runs: one light module, so that a command imports them (and
subclasses them) without importing the executor, the sandbox provider or the store at start-up."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from rsi.core.arm import TrialSpec
    from rsi.core.trial import TrialResult
    from rsi.store.tables import CandidateRow


class Progress:
    """What the CLI hooks into: a total, then one call per started and finished trial."""

    def start(self, total: int, done: int, job_id: str) -> None: ...

    def trial_started(self, spec: TrialSpec) -> None: ...

    def trial_finished(self, spec: TrialSpec, result: TrialResult) -> None: ...


class DiscoverHooks:
    """What the CLI hooks into: messages, each candidate as it is generated, a run_job Progress per stage."""

    def message(self, text: str) -> None: ...

    def generated(self, row: CandidateRow, done: int, total: int) -> None: ...

    def stage(self, name: str) -> Progress:
        return Progress()


class ExpandHooks:
    """What the CLI hooks into: messages, and a run_job Progress per child job."""

    def message(self, text: str) -> None: ...

    def stage(self, key: str) -> Progress:
        return Progress()


class CycleHooks:
    """What the CLI hooks into: messages, one progress per phase stage, training steps."""

    def message(self, text: str) -> None: ...

    def phase(self, name: str) -> None: ...

    def stage(self, phase: str, key: str) -> Progress:
        return Progress()

    def train_step(self, step: int, total: int, loss: float) -> None: ...

    # phase boundaries, for the trackers (rsi.track): the cycle job opened, a phase ended (its recorded info and
    # its outcome object, None when it did not run here), the cycle ended (its CycleOutcome)
    def cycle_started(self, job_id: str, generation: str, split: dict[str, float]) -> None: ...

    def phase_done(self, name: str, info: dict[str, Any], result: Any) -> None: ...

    def cycle_done(self, outcome: Any) -> None: ...


__all__ = ["CycleHooks", "DiscoverHooks", "ExpandHooks", "Progress"]
