"""A short tracked cycle for the tracker tests: the fake-sandbox cycle of tests/unit/test_cycle_loop.py, its update
on a command backend that also reports a loss, KL and validation curve (as the local backend does), and the
hooks the CLI uses (rsi.cli.tracking.CycleTracking) forwarding the phase boundaries to a TrackingSession."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rsi.cli.tracking import CycleTracking
from rsi.loop.context import WorkspaceContext
from rsi.loop.cycle.phase import CycleHooks, CycleOutcome, cycle
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.track.session import TrackingSession
from rsi.train.backends import BACKENDS, CommandBackend
from rsi.train.base import TrainRequest, TrainResult
from tests.unit.test_cycle_loop import _req

LOSSES = [2.0, 1.5, 1.25, 1.0]
KL = [0.0, 0.01, 0.02, 0.03]
VALIDATION = [[0, -1.9], [2, -1.4], [4, -1.1]]


class CurvesBackend(CommandBackend):
    """The command backend (a real PEFT directory) plus the curves the local backend returns."""

    name = "curves"

    def train(self, req: TrainRequest) -> TrainResult:
        res = super().train(req)
        return TrainResult(adapter_dir=res.adapter_dir, steps=len(LOSSES), losses=list(LOSSES),
                           metrics={**res.metrics, "kl_curve": list(KL), "logprob_before": -2.0,
                                    "logprob_after": -1.0,
                                    "validation": {"curve": VALIDATION, "samples": 2, "best_step": 4, "best": -1.1,
                                                   "stopped_at": None}})


BACKENDS.add("curves", CurvesBackend)


class TrackedHooks(CycleHooks):
    """What rsi/cli/cycle.py's hooks do for the trackers, without the progress bars."""

    def __init__(self, tracking: CycleTracking) -> None:
        self.tracking = tracking

    def cycle_started(self, job_id: str, generation: str, split: dict[str, float]) -> None:
        self.tracking.cycle_started(job_id, generation, split)

    def phase_done(self, name: str, info: dict[str, Any], result: Any) -> None:
        self.tracking.phase_done(name, info, result)

    def cycle_done(self, outcome: Any) -> None:
        self.tracking.cycle_done(outcome)


def tracked_cycle(ctx: WorkspaceContext, provider: FakeSandboxProvider, tmp_path: Path,
                  session: TrackingSession) -> CycleOutcome:
    """One cycle reported to `session`, with an HTML file attached afterwards as the CLI attaches its report;
    the session is closed (everything sent) on return."""
    tracking = CycleTracking(session, ctx)
    try:
        out = cycle(ctx, _req(provider, tmp_path, backend="curves"), TrackedHooks(tracking))
        report = tmp_path / "diff-report.html"
        report.write_text("<html><body>diff</body></html>")
        tracking.artifact(report)
    finally:
        session.close()
    return out
