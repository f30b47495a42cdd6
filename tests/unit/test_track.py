"""Trackers (issue 38) against the fake tracker: what a cycle reports (a run per cycle, a nested run per phase,
params, per-step curves, the decision, artifacts), that a failing or slow tracker never fails or slows the loop,
and that an unknown tracker or a missing extra is one line naming the fix."""

from __future__ import annotations

import importlib.util
import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from rsi.cli.app import app
from rsi.core.errors import ConfigError, NotFoundError
from rsi.core.settings import TrackingSettings
from rsi.loop.context import WorkspaceContext
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.track import records
from rsi.track.base import FakeTracker, RunRecord
from rsi.track.registry import check, parse_names
from rsi.track.session import TrackingSession, open_session
from tests.trackkit import KL, LOSSES, VALIDATION, tracked_cycle
from tests.unit.test_cycle_loop import ctx  # noqa: F401 - the fixture

__all__ = ["ctx"]


def _session(*trackers: FakeTracker, warned: list[str] | None = None) -> TrackingSession:
    sink = warned if warned is not None else []
    return TrackingSession({t.name: (lambda t=t: t) for t in trackers}, warn=sink.append)


def test_cycle_reports_a_run_with_a_nested_run_per_phase(ctx: WorkspaceContext,  # noqa: F811
                                                          provider: FakeSandboxProvider, tmp_path: Path) -> None:
    fake = FakeTracker()
    out = tracked_cycle(ctx, provider, tmp_path, _session(fake))
    assert out.verdict == "promoted"
    starts = {k: p for m, k, p in fake.calls if m == "start_run"}
    cyc = out.job_id
    assert list(starts) == [cyc, *(f"{cyc}/{p}" for p in ("discover", "expand", "update", "promote"))]
    assert all(starts[f"{cyc}/{p}"]["parent"] == cyc for p in ("discover", "expand", "update", "promote"))  # type: ignore[index]
    params = fake.merged("log_params", cyc)
    gen0 = ctx.generation("gen-0000")
    assert params["generation"] == "gen-0000" and params["parent"] == "none"
    assert params["config_digest"] == gen0.harness_config.digest and params["contract_version"] == gen0.contract
    assert params["base_model"] == gen0.base_model.id and params["budget"] == 100
    # the update's curves, step by step
    up = fake.merged("log_metrics", f"{cyc}/update")
    assert up["train/loss"] == [(i, x) for i, x in enumerate(LOSSES, 1)]
    assert up["train/kl"] == [(i, x) for i, x in enumerate(KL, 1)]
    assert up["train/val_logprob"] == [(s, v) for s, v in VALIDATION]
    assert fake.merged("log_params", f"{cyc}/update")["candidate"] == "gen-0001"
    # promote: rates, p-value, each gate; the decision as a tag on the phase and on the cycle
    pm = fake.merged("log_metrics", f"{cyc}/promote")
    assert pm["candidate_rate"][0][1] > pm["parent_rate"][0][1]
    assert pm["gate/significance"] == [(0, 1.0)] and "p_value" in pm
    assert fake.merged("set_tags", f"{cyc}/promote")["decision"] == "promoted"
    assert fake.merged("set_tags", cyc)["decision"] == "promoted"
    ex = fake.merged("log_metrics", f"{cyc}/expand")
    assert "coverage_rate" in ex and "spend/total" in ex
    assert fake.merged("log_metrics", f"{cyc}/discover")["admitted"] == [(0, 2.0)]
    # artifacts: the candidate's manifest (update and cycle) and the HTML report (cycle), all sent last-but-end
    arts = [(k, Path(str(p)).name) for m, k, p in fake.calls if m == "log_artifact"]
    assert (f"{cyc}/update", "gen-0001.yaml") in arts and (cyc, "gen-0001.yaml") in arts
    assert (cyc, "diff-report.html") in arts
    ends = [k for m, k, _ in fake.calls if m == "end_run"]
    assert ends[-1] == cyc and len(ends) == 5 and fake.closed


def test_a_failing_tracker_is_dropped_and_the_others_go_on(ctx: WorkspaceContext,  # noqa: F811
                                                             provider: FakeSandboxProvider, tmp_path: Path) -> None:
    broken, good = FakeTracker(name="broken", fail_on="log_metrics"), FakeTracker(name="good")
    warned: list[str] = []
    session = _session(broken, good, warned=warned)
    out = tracked_cycle(ctx, provider, tmp_path, session)
    assert out.verdict == "promoted" and out.stopped is None  # the loop never saw the failure
    assert len(warned) == 1 and "tracker broken failed" in warned[0] and "on purpose" in warned[0]
    assert session.failures() == {"broken": "RuntimeError: broken: log_metrics failed (on purpose)"}
    assert not broken.of("log_metrics") and not broken.of("end_run")  # nothing after the failure
    assert len(good.of("end_run")) == 5


def test_a_slow_tracker_does_not_slow_the_caller() -> None:
    slow = FakeTracker(delay=0.05)
    session = _session(slow)
    t0 = time.monotonic()
    for i in range(10):
        rec = RunRecord(params={"i": i})
        rec.metric("x", i)
        session.run(f"r{i}", f"run {i}", rec)
    queued = time.monotonic() - t0
    session.close()
    assert queued < 0.5, f"queueing 10 runs took {queued:.2f} s"  # in line, the 40 calls would sleep 2 s
    assert len(slow.of("end_run")) == 10


def test_close_gives_up_on_a_hung_tracker() -> None:
    hung = FakeTracker(delay=5.0)
    warned: list[str] = []
    session = TrackingSession({"hung": lambda: hung}, warn=warned.append, timeout=0.3)
    session.run("r", "r", RunRecord(params={"a": 1}))
    t0 = time.monotonic()
    session.close()
    assert time.monotonic() - t0 < 2 and "still busy" in warned[0]


def test_update_record_curves_and_no_candidate() -> None:
    training = {"loss_curve": [3.0, 2.0], "kl_curve": [0.0, 0.5], "validation": {"curve": [[0, -2.0], [2, -1.0]]},
                "logprob_before": -2.0, "throughput": {"tokens_per_sec": 100.0}}
    rec = records.phase("update", {"status": "done", "run": "train-1"},
                        {"training": training, "candidate": "gen-0002", "selection": {"accepted": 7}})
    assert rec.metrics["train/loss"] == [(1, 3.0), (2, 2.0)] and rec.metrics["train/kl"] == [(1, 0.0), (2, 0.5)]
    assert rec.metrics["train/val_logprob"] == [(0, -2.0), (2, -1.0)]
    assert rec.metrics["accepted"] == [(0, 7.0)] and rec.metrics["throughput/tokens_per_sec"] == [(0, 100.0)]
    assert rec.params["update_job"] == "train-1" and rec.params["candidate"] == "gen-0002"
    none = records.phase("update", {"status": "no_candidate", "reason": "nothing accepted"}, None)
    assert none.tags["decision"] == "no_candidate" and not none.metrics
    # a figure not measured is left out, never plotted as 0
    p = records.phase("promote", {"status": "done"}, {"verdict": {"p_value": None, "delta": 0.25, "gates": []}})
    assert "p_value" not in p.metrics and p.metrics["delta"] == [(0, 0.25)]


def test_names_unknown_tracker_and_missing_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    assert parse_names(["mlflow,tensorboard", "mlflow", " WandB "]) == ["mlflow", "tensorboard", "wandb"]
    assert parse_names(["mlflow", "none"]) == []
    known = "known: mlflow, tensorboard, wandb"
    with pytest.raises(NotFoundError, match=f"^--report-to: unknown tracker 'neptune'; {known}$"):
        check(["neptune"])
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "wandb" else real(name, *a))
    with pytest.raises(ConfigError, match=r"^--report-to: tracker wandb needs its extra: pip install 'rsi\[wandb\]'$"):
        open_session(["wandb"], TrackingSettings(), Path("."))
    assert open_session([], TrackingSettings(), Path(".")) is None


def test_cli_refuses_an_unknown_tracker_before_running(tmp_path: Path) -> None:
    from rsi.loop.init import init_workspace

    init_workspace(tmp_path / "ws", starter_tasks=False)
    res = CliRunner().invoke(app, ["-w", str(tmp_path / "ws"), "promote", "gen-0000", "--report-to", "neptune"])
    assert res.exit_code == 2 and "unknown tracker 'neptune'" in res.output
    (tmp_path / "ws" / "rsi.yaml").write_text((tmp_path / "ws" / "rsi.yaml").read_text()
                                              + "tracking:\n  report_to: [comet]\n")
    res = CliRunner().invoke(app, ["-w", str(tmp_path / "ws"), "expand", "--budget", "1"])
    assert res.exit_code == 2 and "tracking.report_to" in res.output and "unknown tracker 'comet'" in res.output
