"""What the one CLI grammar added, on fakes: `rsi run --report-to` and `rsi discover --report-to` report one run
each, and `rsi demo --resume JOB` resumes with the demo's own settings in its workspace."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from typer.testing import CliRunner

from rsi.cli.app import app
from rsi.core.errors import InputError
from rsi.loop.context import WorkspaceContext
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.track.base import FakeTracker
from rsi.track.session import TrackingSession
from tests.taskgen import make_tasks

runner = CliRunner()


def _session(fake: FakeTracker) -> TrackingSession:
    return TrackingSession({fake.name: lambda: fake}, warn=lambda _t: None)


def test_run_reports_to_trackers(workspace: WorkspaceContext, provider: FakeSandboxProvider, tmp_path: Path,
                                 monkeypatch: pytest.MonkeyPatch) -> None:
    import rsi.cli.jobs
    import rsi.loop.run

    real = rsi.loop.run.run_job
    monkeypatch.setattr(rsi.loop.run, "run_job", lambda ctx, req, hooks: real(ctx, req, hooks, provider=provider))
    fake = FakeTracker()
    asked: list[Any] = []

    def open_tracking(wctx: WorkspaceContext, names: list[str] | None) -> TrackingSession:
        asked.append(names)
        return _session(fake)

    monkeypatch.setattr(rsi.cli.jobs, "open_tracking", open_tracking)
    tasks = make_tasks(tmp_path / "tasks", 2)
    r = runner.invoke(app, ["run", *map(str, tasks), "--agent", "oracle", "--json", "--report-to", "fake",
                            "-w", str(workspace.ws.root)])
    assert r.exit_code == 0, r.output
    assert asked == [["fake"]]
    job = workspace.store.list_jobs()[0].id
    assert [k for m, k, _ in fake.calls if m == "start_run"] == [job]
    params = fake.merged("log_params", job)
    assert params["agent"] == "oracle" and params["arms"] == 1 and params["run_job"] == job
    metrics = fake.merged("log_metrics", job)
    assert metrics["pass_at_1"] == [(0, 1.0)] and metrics["trials"] == [(0, 2.0)] and "arm1/pass_at_1" in metrics
    assert fake.merged("set_tags", job)["rsi.kind"] == "run" and fake.closed


def test_discover_reports_its_candidates(workspace: WorkspaceContext, monkeypatch: pytest.MonkeyPatch) -> None:
    import rsi.cli.discover
    import rsi.loop.discover.phase

    def cand(state: str) -> Any:
        return SimpleNamespace(name=f"c-{state}", generator="g", family="f", difficulty=1, seed=1, state=state,
                               reason=None, detail=None, split="train", probe_pass_rate=0.5, probe_trials=2,
                               task_digest="d", evidence={}, stage_dir="/nowhere")

    out = SimpleNamespace(job_id="discover-x", candidates=[cand("admitted"), cand("rejected"), cand("admitted")],
                          interrupted=False, reason=None, plan={}, wall_sec=1.0)
    monkeypatch.setattr(rsi.loop.discover.phase, "discover", lambda wctx, req, hooks: out)
    fake = FakeTracker()
    monkeypatch.setattr(rsi.cli.discover, "open_tracking", lambda wctx, names: _session(fake))
    r = runner.invoke(app, ["discover", "--candidates", "3", "--json", "-w", str(workspace.ws.root)])
    assert r.exit_code == 0, r.output
    assert [k for m, k, _ in fake.calls if m == "start_run"] == ["discover-x"]
    m = fake.merged("log_metrics", "discover-x")
    assert m["candidates"] == [(0, 3.0)] and m["admitted"] == [(0, 2.0)]
    assert fake.merged("log_params", "discover-x")["generation"] == "gen-0000"


def test_demo_resume_runs_the_demo_request_in_its_workspace(workspace: WorkspaceContext, tmp_path: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    import rsi.loop.cycle.runs
    from rsi.loop.cycle.demo import DEMO_BUDGET, demo_request

    seen: list[Any] = []

    def fake_cycles(wctx: WorkspaceContext, req: Any, cycles: int, hooks: Any) -> Any:
        seen.append((wctx.ws.root, req, cycles))
        raise InputError("--resume", None, "stop here (test)")

    monkeypatch.setattr(rsi.loop.cycle.runs, "run_cycles", fake_cycles)
    root = workspace.ws.root
    r = runner.invoke(app, ["demo", "--dir", str(root), "--resume", "cycle-123", "--cycles", "2"])
    assert r.exit_code == 2 and "stop here (test)" in r.output
    [(where, req, cycles)] = seen
    assert where == root.resolve() or where == root
    assert req.resume == "cycle-123" and cycles == 2
    want = demo_request(DEMO_BUDGET)
    assert (req.n, req.sources, req.generators, req.compositions, req.budget) == (
        want.n, want.sources, want.generators, want.compositions, want.budget)  # --budget's default is DEMO_BUDGET
    # the same through -w; nothing there: one line, nothing made
    r = runner.invoke(app, ["-w", str(tmp_path / "none"), "demo", "--resume", "cycle-123"])
    assert r.exit_code == 2 and "no rsi.yaml" in r.output and not (tmp_path / "none").exists()
    r = runner.invoke(app, ["demo", "--dir", str(root), "-w", str(tmp_path)])
    assert r.exit_code == 2 and "name two workspaces" in r.output


def test_promote_resume_takes_the_jobs_generation_and_refuses_another(workspace: WorkspaceContext,
                                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    """`rsi promote --resume JOB` needs no GEN (the job names it); a GEN the job does not measure, a job that is
    not a promote job, and neither GEN nor --resume are each one line and exit 2, before anything runs."""
    import rsi.loop.promote.phase

    workspace.store.create_job("prom-1", agent="harness", generation="gen-0001", harness_config_digest=None,
                               attempts=1, concurrency=1, task_paths=[], tasks_fingerprint="", trials=[],
                               kind="promote")
    workspace.store.create_job("job-1", agent="harness", generation="gen-0001", harness_config_digest=None,
                               attempts=1, concurrency=1, task_paths=[], tasks_fingerprint="", trials=[])
    asked: list[Any] = []

    def fake_promote(wctx: WorkspaceContext, req: Any, progress: Any) -> Any:
        asked.append((req.gen, req.resume))
        raise InputError("--resume", None, "stop here (test)")

    monkeypatch.setattr(rsi.loop.promote.phase, "promote", fake_promote)
    w = ["-w", str(workspace.ws.root)]
    r = runner.invoke(app, [*w, "promote", "--resume", "prom-1"])
    assert r.exit_code == 2 and "stop here (test)" in r.output and asked == [("gen-0001", "prom-1")]
    for args, said in ((["promote", "gen-0002", "--resume", "prom-1"], "not the generation promote job prom-1"),
                       (["promote", "--resume", "job-1"], "no promote job job-1"),
                       (["promote"], "name the candidate generation")):
        r = runner.invoke(app, [*w, *args])
        assert r.exit_code == 2 and said in r.output, (args, r.output)
    assert len(asked) == 1
