"""Progress bars for long work: one rich bar per job or phase stage, counting trials and passes."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rsi.cli.common import err_console
from rsi.loop.hooks import Progress as RunProgress

if TYPE_CHECKING:
    from rsi.core.arm import TrialSpec
    from rsi.core.trial import TrialResult


def progress(quiet: bool = False) -> Progress:
    """The bars' container, on stderr; gone at the end when `quiet` (JSON output), off when not a terminal."""
    return Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                    TextColumn("passed {task.fields[passed]}"), TimeElapsedColumn(), console=err_console,
                    transient=quiet, disable=not err_console.is_terminal)


class TrialBar(RunProgress):
    """One bar: a job's (or a stage's) trials, done out of planned, with the passes so far."""

    def __init__(self, p: Progress, name: str) -> None:
        self.p = p
        self.task_id = p.add_task(name, total=None, passed=0)
        self.passed = 0

    def start(self, total: int, done: int, job_id: str) -> None:
        self.p.update(self.task_id, total=total, completed=done)

    def trial_finished(self, spec: TrialSpec, result: TrialResult) -> None:
        self.passed += int(result.passed)
        self.p.update(self.task_id, advance=1, passed=self.passed)
