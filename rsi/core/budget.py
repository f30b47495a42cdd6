"""Budgets: a limit and what was spent, in one unit, checked before each trial starts.

`trials` counts graded trials (infra failures are not charged: they say nothing and are re-run),
`tokens` counts prompt + completion tokens, `minutes` counts trial minutes (the sum of each
trial's duration, so a budget means the same at -n 1 and -n 4). A trial may start while what is
spent plus what is in flight stays under the limit (for `trials`) or while anything is left
(for the others, whose cost is known only afterwards).
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Literal

from rsi.core.trial import TrialResult, is_infra

BudgetUnit = Literal["trials", "tokens", "minutes"]
UNITS: tuple[str, ...] = ("trials", "tokens", "minutes")


def trial_cost(unit: BudgetUnit, result: TrialResult) -> float:
    if unit == "trials":
        return 0.0 if is_infra(result.error_type) else 1.0
    if unit == "tokens":
        return float(result.usage.prompt_tokens + result.usage.completion_tokens)
    return result.timings.total / 60.0


@dataclass
class Budget:
    """Thread-safe: workers ask `try_start` under the executor's gate, the driver `settle`s."""

    unit: BudgetUnit
    limit: float
    spent: float = 0.0
    in_flight: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def try_start(self) -> bool:
        with self._lock:
            room = self.spent + (self.in_flight if self.unit == "trials" else 0) < self.limit
            if room:
                self.in_flight += 1
            return room

    def settle(self, result: TrialResult | None) -> float:
        """A started trial ended (None: it was cancelled): release its slot, charge its cost."""
        with self._lock:
            self.in_flight = max(0, self.in_flight - 1)
            cost = trial_cost(self.unit, result) if result is not None else 0.0
            self.spent += cost
            return cost

    @property
    def exhausted(self) -> bool:
        with self._lock:
            return self.spent >= self.limit
