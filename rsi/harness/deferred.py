"""A MoL summary hop written off the trial's critical path, while the runner grades the trial.

The summary of a user turn is only read by the *next* user turn (other adapters see it in place of the turn),
so nothing in the turn itself waits for it: a served conversation sends the answer and summarises in the
background. A trial does the same when its runner allows it (`AgentContext.extra["defer_summary"]`): the
harness starts the summary call on a thread as the answering adapter's turn ends and returns; the runner
freezes, snapshots and verifies the sandbox meanwhile, then calls `finish`, which waits for the summary,
adds its step to the trajectory (written again) and charges its tokens. A summary that fails or outlives
the agent's deadline is infra (MODEL_UNAVAILABLE, retried), exactly as when it runs in line.

Recorded with the trial (`extra.rsi.mol`): `turn_sec` (route through the last answer call and its tool
runs) and `summary_wait_sec` (how long the runner still waited for the summary once grading was done):
the hops' share of the turn's latency is (route + wait) / (turn + wait).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any

from rsi.core.trial import ErrorType, Usage
from rsi.harness.agent import AgentOutcome
from rsi.harness.atif import Metrics, TrajectoryRecorder, agent_log_text
from rsi.harness.mol import MolInfraError, MolModel, MolSession


def summary_step(mol: MolSession, text: str, rec: TrajectoryRecorder, outcome: AgentOutcome) -> None:
    """Charge the summary hop just recorded by `mol` to the outcome and add its ATIF step."""
    hop = mol.records[-1]
    outcome.usage = outcome.usage.add(Usage(prompt_tokens=hop.prompt_tokens, cached_tokens=hop.cached_tokens,
                                            completion_tokens=hop.completion_tokens, calls=1))
    rec.add_agent(message=text, model_name=hop.serve_name,
                  metrics=Metrics(prompt_tokens=hop.prompt_tokens, completion_tokens=hop.completion_tokens,
                                  cached_tokens=hop.cached_tokens),
                  extra={"hop": "summary", "adapter": hop.label, "latency_sec": hop.wall_sec})


class DeferredSummary:
    """The summary hop of one MoL trial, running on its own thread; `finish` completes the trial's record."""

    def __init__(self, mol: MolSession, client: MolModel, deadline: float, rec: TrajectoryRecorder,
                 outcome: AgentOutcome, trial_dir: Path, close: Any = None) -> None:
        self.mol, self.rec, self.outcome, self.trial_dir = mol, rec, outcome, trial_dir
        self.deadline = deadline
        self._close = close  # the trial's own client: closed once the summary is done with it
        self._future: Future[str] = Future()
        self._done = False
        threading.Thread(target=self._run, args=(client,), name="rsi-mol-summary", daemon=True).start()

    def _run(self, client: MolModel) -> None:
        try:
            self._future.set_result(self.mol.summarize(client, deadline=self.deadline))
        except BaseException as e:  # noqa: BLE001 - handed to finish(), which records it as infra
            self._future.set_exception(e)

    def finish(self) -> None:
        """Wait for the summary (no longer than the agent's deadline allows), then record it: its step and
        tokens, or an infra error when it failed. Idempotent; the trajectory is written again either way."""
        if self._done:
            return
        self._done = True
        t0 = time.monotonic()
        try:
            text = self._future.result(timeout=max(1.0, self.deadline - time.monotonic()) + 5.0)
        except Exception as e:  # noqa: BLE001 - any failure of the hop (MolInfraError, a timeout) is infra
            if self.outcome.error_type is None:
                self.outcome.error_type = ErrorType.MODEL_UNAVAILABLE
                self.outcome.error_message = (str(e) if isinstance(e, MolInfraError) else
                                              f"mol: the summary hop of {self.mol.label} failed: {e!r}")
            self.rec.rsi_extra["stop_reason"] = "summary_failed"
        else:
            summary_step(self.mol, text, self.rec, self.outcome)
        finally:
            if self._close is not None:
                self._close()
        self.rec.rsi_extra["mol"] = {**dict(self.rec.rsi_extra.get("mol") or {}), **self.mol.as_json(),
                                     "summary_wait_sec": round(time.monotonic() - t0, 4)}
        fm = self.rec.trajectory.final_metrics
        self.rec.finish(prompt_tokens=self.outcome.usage.prompt_tokens,
                        completion_tokens=self.outcome.usage.completion_tokens,
                        cached_tokens=self.outcome.usage.cached_tokens,
                        extra={**(fm.extra if fm is not None and fm.extra else {}), "calls": self.outcome.usage.calls})
        self.outcome.trajectory_path = self.rec.write(self.trial_dir / "trajectory.json")
        (self.trial_dir / "agent.log").write_text(agent_log_text(self.rec.trajectory))


__all__ = ["DeferredSummary", "summary_step"]
