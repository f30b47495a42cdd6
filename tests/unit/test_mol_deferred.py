"""The MoL summary hop off the critical path (rsi.harness.deferred): the turn ends before the summary, the
runner grades meanwhile, and `finish` records the summary (or an infra error) as the in-line hop would."""

from __future__ import annotations

import threading
from pathlib import Path
from typing import Any

from rsi.core.mol import summary_request
from rsi.core.trial import ErrorType
from rsi.harness.agent_loop import HarnessAgent
from rsi.harness.atif import load_trajectory
from rsi.harness.fakes import ScriptedChatModel, ScriptedSandbox, make_context
from rsi.models.client import ChatResult, ModelRequestError
from tests.unit.test_mol_harness import _config, _contract, _gen


class GatedSummaryModel(ScriptedChatModel):
    """Answers as scripted; the summary call waits until the test opens the gate."""

    def __init__(self, *a: Any, **k: Any) -> None:
        super().__init__(*a, **k)
        self.gate = threading.Event()
        self.summary_started = threading.Event()

    def chat(self, model: str, messages: list[dict[str, Any]], **kw: Any) -> ChatResult:
        if messages[-1]["content"] == summary_request(192):
            self.summary_started.set()
            assert self.gate.wait(20), "the test never opened the gate"
        return super().chat(model, messages, **kw)


def _run(tmp_path: Path, model: ScriptedChatModel, defer: bool = True) -> Any:
    ctx = make_context(tmp_path / "trial", contract=_contract(), config=_config(), chat_model=model,
                       instruction="Count the ERROR lines in /app/app.log.")
    ctx.generation = _gen()
    if defer:
        ctx.extra["defer_summary"] = True
    out = HarnessAgent().run(ScriptedSandbox(outputs={"grep -c ERROR /app/app.log": "3"}), ctx)
    return out, ctx


def _hops(ctx: Any) -> list[str]:
    traj = load_trajectory(ctx.trial_dir / "trajectory.json")
    return [s.extra["hop"] for s in traj.steps if s.source == "agent"]


def test_the_turn_ends_before_the_summary_and_finish_records_it(tmp_path: Path) -> None:
    model = GatedSummaryModel(["```bash\ngrep -c ERROR /app/app.log\n```", "DONE", "Counted ERROR lines."],
                              labels=["L2"])
    out, ctx = _run(tmp_path, model)
    assert out.deferred is not None and out.error_type is None
    assert model.summary_started.wait(10)  # the summary is running while the agent has already returned
    assert _hops(ctx) == ["route", "answer", "answer"] and out.usage.calls == 3
    model.gate.set()
    out.deferred.finish()
    out.deferred.finish()  # idempotent: one summary step
    assert _hops(ctx) == ["route", "answer", "answer", "summary"] and out.usage.calls == 4
    traj = load_trajectory(ctx.trial_dir / "trajectory.json")
    mol = traj.extra["rsi"]["mol"]
    assert mol["summaries"] == [{"user_turn": 1, "label": "L2", "text": "Counted ERROR lines."}]
    assert [c["hop"] for c in mol["calls"]] == ["route", "answer", "answer", "summary"]
    assert mol["turn_sec"] > 0 and mol["summary_wait_sec"] >= 0 and mol["family"] == ctx.task.family
    assert traj.final_metrics is not None and traj.final_metrics.extra["calls"] == 4
    assert "Counted ERROR lines." in (ctx.trial_dir / "agent.log").read_text()


def test_in_line_without_the_runners_leave(tmp_path: Path) -> None:
    model = ScriptedChatModel(["DONE", "Did nothing."], labels=["L1"])
    out, ctx = _run(tmp_path, model, defer=False)
    assert out.deferred is None and _hops(ctx) == ["route", "answer", "summary"]
    assert "summary_wait_sec" not in load_trajectory(ctx.trial_dir / "trajectory.json").extra["rsi"]["mol"]


def test_a_deferred_summary_that_fails_is_infra_once_finished(tmp_path: Path) -> None:
    model = ScriptedChatModel(["DONE", ModelRequestError("bad", status_code=400)], labels=["L1"])
    out, ctx = _run(tmp_path, model)
    assert out.deferred is not None
    out.deferred.finish()
    assert out.error_type == ErrorType.MODEL_UNAVAILABLE and "summary" in (out.error_message or "")
    traj = load_trajectory(ctx.trial_dir / "trajectory.json")
    assert traj.extra["rsi"]["stop_reason"] == "summary_failed"
    assert _hops(ctx) == ["route", "answer"]



class QueuedModel(ScriptedChatModel):
    """Every call says it waited 0.25 s in the server's queue (the embedded server's X-Queue-Seconds)."""

    def chat(self, model: str, messages: list[dict[str, Any]], **kw: Any) -> ChatResult:
        import dataclasses
        import time

        time.sleep(0.3)  # the wall time the queue is part of
        return dataclasses.replace(super().chat(model, messages, **kw), queue_sec=0.25)


def test_each_hop_records_the_seconds_it_waited_in_the_servers_queue(tmp_path: Path) -> None:
    out, ctx = _run(tmp_path, QueuedModel(["DONE", "Did nothing."], labels=["L1"]), defer=False)
    calls = load_trajectory(ctx.trial_dir / "trajectory.json").extra["rsi"]["mol"]["calls"]
    assert [(c["hop"], c["queue_sec"]) for c in calls] == [("route", 0.0), ("answer", 0.25), ("summary", 0.25)]
    assert all(c["queue_sec"] <= c["wall_sec"] for c in calls)
