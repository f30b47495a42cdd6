"""Which part of the sealed holdout a holdout task is measured in (pure): the one rule promote, the reports and
the cycle's budget share.

A task's task.toml names its part (`[metadata.rsi] holdout_part`: `in_skill` or `unseen`; none: `unseen`) and
the cycle its instance was drawn for (`instance_cycle`; none: 0). Every cycle draws a fresh in-skill part; the
in-skill tasks of the newest cycle that drew any are the **in-skill** part (the question this promotion asks),
and every earlier cycle's in-skill tasks are the frozen **no_forgetting** part: still active, measured for both
generations at every promotion, gated by non-inferiority (the contract's `promotion.gates`). A workspace whose
in-skill tasks were all drawn by one cycle (or before cycles were numbered) has no no-forgetting part.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping

NO_FORGETTING = "no_forgetting"
# every part a holdout task can be measured in, in the order pages and tables show them
EVAL_PARTS = ("in_skill", "unseen", NO_FORGETTING)


def newest_in_skill_cycle(tasks: Iterable[tuple[str | None, int | None]]) -> int | None:
    """The newest cycle among (holdout_part, instance_cycle) pairs that drew an in-skill task (None: none did)."""
    cycles = [c or 0 for part, c in tasks if part == "in_skill"]
    return max(cycles) if cycles else None


def measured_part(part: str | None, cycle: int | None, newest: int | None) -> str:
    """The part a holdout task is measured in: its own (`""` when it names none), except an in-skill task drawn
    before the newest in-skill cycle, which is `no_forgetting`."""
    if part == "in_skill" and newest is not None and (cycle or 0) < newest:
        return NO_FORGETTING
    return part or ""


def measured_parts(tasks: Mapping[str, tuple[str | None, int | None]]) -> dict[str, str]:
    """name -> the part each holdout task is measured in (names mapped to their (holdout_part, instance_cycle));
    a task naming no part maps to ""."""
    newest = newest_in_skill_cycle(tasks.values())
    return {n: measured_part(p, c, newest) for n, (p, c) in tasks.items()}


__all__ = ["EVAL_PARTS", "NO_FORGETTING", "measured_part", "measured_parts", "newest_in_skill_cycle"]
