"""How many trials were graded at each integrity level (DESIGN §5), for the summaries that show it.

Strongest level first; `none` counts trials with no level recorded (not run yet, cancelled before
grading was planned, or rows older than the field). Every key is always there, so `--json` readers
get one shape.
"""

from __future__ import annotations

from collections.abc import Iterable

from rsi.core.contract import Integrity

LEVELS: tuple[Integrity, ...] = ("declared_outputs", "snapshot", "shared")
NONE = "none"


def integrity_counts(levels: Iterable[str | None]) -> dict[str, int]:
    """Trials per integrity level, from each trial's recorded level: {declared_outputs, snapshot, shared, none}
    in that order (a level this rsi does not know is counted under its own name, after them)."""
    counts: dict[str, int] = {lvl: 0 for lvl in (*LEVELS, NONE)}
    for lvl in levels:
        key = lvl or NONE
        counts[key] = counts.get(key, 0) + 1
    return counts
