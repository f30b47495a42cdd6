"""benchmarks/cycle_profile.py (issue 47 item 1): a cycle's wall time per phase and per trial step, read from a real
store (SQLite file, rows written through the store API; only the clock times are set by hand so the sums are known)."""

from __future__ import annotations

import sys
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from rsi.core.trial import Timings, TrialResult, TrialStatus
from rsi.store.repo import Store
from rsi.store.tables import JobRow, TrainingRunRow, TrialRow

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "benchmarks"))
sys.path.insert(0, str(ROOT / "scripts"))

import cycle_profile as cp  # noqa: E402
import render_results  # noqa: E402
from _records import Recorder, load_records  # noqa: E402

T0 = datetime(2025, 1, 1, tzinfo=UTC)
# one harness trial with every finer span: 40 s in all
FULL = Timings(build=10, start=2, agent=20, model=12, model_queue=2, model_prefill=3, model_decode=6, sandbox_exec=6,
               snapshot=3, commit=1, agent_remove=1, verify=5, verify_start=1, verify_exec=3, verify_remove=0.5,
               total=40)


def at(sec: float) -> datetime:
    return T0 + timedelta(seconds=sec)


def _job(store: Store, job_id: str, kind: str, trials: list[str], tmp: Path, **kw: object) -> None:
    rows = [TrialRow(id=t, job_id=job_id, task_name=t, task_digest=f"d-{t}", agent="harness", attempt=1,
                     status=TrialStatus.PENDING.value, trial_dir=str(tmp / job_id / t)) for t in trials]
    store.create_job(job_id, agent="harness", generation="gen-0000", harness_config_digest=None, attempts=1,
                     concurrency=2, task_paths=[], tasks_fingerprint="", trials=rows, kind=kind, **kw)  # type: ignore[arg-type]


def _finish(store: Store, trial: str, job_id: str, timings: Timings, tmp: Path, *, write: bool) -> None:
    store.mark_running(trial)
    r = TrialResult(trial_id=trial, job_id=job_id, task=trial, task_digest=f"d-{trial}", attempt=1, agent="harness",
                    trial_dir=str(tmp / job_id / trial), timings=timings)
    if write:  # the harness's result.json (with the finer spans); without it the store's columns are read
        Path(r.trial_dir).mkdir(parents=True)
        Path(r.trial_dir, "result.json").write_text(r.model_dump_json())
    store.record_trial(r)


def _clock(store: Store, model: type, key: str, **times: datetime) -> None:
    with store.session() as s:
        row = s.get(model, key)
        for k, v in times.items():
            setattr(row, k, v)
        s.add(row)
        s.commit()


@pytest.fixture
def store(tmp_path: Path) -> Store:
    """A cycle of 360 s: discover 10..110 (two overlapping 40 s trials), expand 110..160 (none), update 160..260
    (a training run 180..250), promote 260..360 (one 30 s trial recorded before the finer spans)."""
    st = Store(f"sqlite:///{tmp_path / 'rsi.db'}")
    phases = {name: {"started_at": at(s).isoformat(), "status": "done"}
              for name, s in (("discover", 10), ("expand", 110), ("update", 160), ("promote", 260))}
    _job(st, "cyc-1", "cycle", [], tmp_path, phase="cycle", params={"phases": phases})
    _job(st, "disc-1", "discover", [], tmp_path, phase="discover")
    _job(st, "disc-1-oracle", "run", ["a", "b"], tmp_path, phase="discover", parent_job="disc-1",
         params={"stage": "oracle"})
    _job(st, "prom-1", "promote", ["c"], tmp_path, phase="promote")
    for t in ("a", "b"):
        _finish(st, t, "disc-1-oracle", FULL, tmp_path, write=True)
    _finish(st, "c", "prom-1", Timings(agent=20, model_queue=1, snapshot=2, verify=5, total=28), tmp_path, write=False)
    st.start_training_run("upd-1", generation="gen-0000", backend="local", objective="sft", config_digest="x",
                          dataset_path="d.jsonl", dataset_digest="y", params={}, metrics={})
    st.finish_training_run("upd-1", status="done", metrics={"training": {"wall_sec": 60, "throughput": {
        "setup_sec": 10, "forward_sec": 20, "backward_sec": 15, "optimizer_sec": 5, "train_sec": 41}}})
    st.finish_job("cyc-1", "done")
    _clock(st, JobRow, "cyc-1", created_at=T0, finished_at=at(360))
    _clock(st, JobRow, "disc-1", created_at=at(12), finished_at=at(108))
    _clock(st, JobRow, "disc-1-oracle", created_at=at(40), finished_at=at(111))  # its record lands a moment late
    _clock(st, JobRow, "prom-1", created_at=at(265), finished_at=at(350))
    _clock(st, TrialRow, "a", started_at=at(50), finished_at=at(90))
    _clock(st, TrialRow, "b", started_at=at(70), finished_at=at(110))
    _clock(st, TrialRow, "c", started_at=at(270), finished_at=at(300))
    _clock(st, TrainingRunRow, "upd-1", created_at=at(180), finished_at=at(250))
    return st


def test_a_trials_finer_spans_split_its_steps_and_an_old_row_stays_unsplit() -> None:
    steps = cp.trial_steps(FULL.model_dump())
    assert steps["image build"] == 10 and steps["container create/start"] == 3
    assert (steps["model queue wait"], steps["model prefill"], steps["model decode"]) == (2, 3, 6)
    assert steps["model call other (HTTP, tokenise, parse)"] == 1 and steps["agent sandbox exec"] == 6
    assert steps["agent harness other"] == 2 and steps["agent (not split)"] == 0
    assert (steps["snapshot commit"], steps["container remove"], steps["verifier exec"]) == (1, 1.5, 3)
    assert sum(steps.values()) == pytest.approx(40)
    old = cp.trial_steps({"agent": 20, "model_queue": 1, "snapshot": 2, "verify": 5, "total": 28})
    assert old["agent (not split)"] == 19 and old["model prefill"] == 0
    assert old["verify other (reward read; shared level or not split)"] == 5
    assert sum(old.values()) == pytest.approx(28)


def test_phase_walls_shares_and_per_step_sums(store: Store, tmp_path: Path) -> None:
    [p] = cp.profile(store, tmp_path)
    assert p.id == "cyc-1" and p.wall_sec == 360 and p.trials == 3
    walls = {ph.name: ph.wall_sec for ph in p.phases}
    assert walls == {"discover": 100, "expand": 50, "update": 100, "promote": 100}
    data = p.as_json()
    shares = {ph["name"]: ph["share"] for ph in data["phases"]}
    assert shares["discover"] == pytest.approx(100 / 360) and sum(shares.values()) == pytest.approx(350 / 360)
    parts = {ph.name: {x.name: x.wall_sec for x in ph.parts} for ph in p.phases}
    # a and b overlap 20 s: each gets 30 s of wall; 40 s of discover ran no trial
    assert parts["discover"] == {"stage oracle (trials)": 60, cp.IDLE["discover"]: 40}
    assert parts["update"] == {"dataset (select, leakage check, export)": 20, "training: model load + tokenise": 10,
                               "training: forward": 20, "training: backward": 15, "training: optimizer step": 5,
                               "training: validation, eval, save": 10,
                               "adapter check, register, load into the server": 10,
                               "before / after training (bookkeeping)": 10}
    for ph in p.phases:
        assert sum(x.wall_sec for x in ph.parts) == pytest.approx(ph.wall_sec)
    steps = {s["step"]: s for s in data["steps"]}
    build = steps["image build"]
    assert build["trial_sec"] == 20 and build["by_phase"] == {"discover": 20}
    assert build["trial_share"] == pytest.approx(20 / 110)  # a, b: 40 s each; c: 30 s (28 s of spans + 2 s after)
    assert build["wall_sec"] == pytest.approx(15)  # each trial's 30 s of wall, a quarter of it building
    assert steps["agent (not split)"]["by_phase"] == {"promote": 19}
    assert steps["outside spans (retries, cleanup, recording)"]["trial_sec"] == pytest.approx(3)
    assert steps["training: forward"]["wall_sec"] == 20 and steps["training: forward"]["trial_sec"] == 0
    assert steps["promote: no trial running"]["wall_sec"] == 70
    assert steps["cycle: before the first phase"]["wall_sec"] == 10
    # the wall column adds up to the cycle's wall time, the trial-seconds to the trials' intervals
    assert sum(s["wall_sec"] for s in data["steps"]) == pytest.approx(360)
    assert sum(s["trial_sec"] for s in data["steps"]) == pytest.approx(110)


def test_the_record_renders_as_the_profile_section(store: Store, tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RSI_BENCH_RECORDS", str(tmp_path / "records"))
    rec = Recorder("cycle_profile", "Cycle profile", argv=["ws"])
    cp.record(cp.profile(store, tmp_path), rec)
    rec.write()
    [r] = load_records(tmp_path / "records")
    figs = {f.id: f for f in r.figures}
    assert figs["c1.phase.discover.share"].value == pytest.approx(100 * 100 / 360, abs=1e-4)
    assert figs["c1.step.image_build.trial"].value == 20
    page = render_results.render([r])
    assert "| discover | **1.67 min** | 27.8% |" in page
    assert "| image build | 20.0 s | 18.2% | 15.0 s | 4.2% |" in page
    for f in r.figures:  # every figure is on the page
        assert render_results.fmt(f.value, f.unit) in page, f.id


def test_a_workspace_without_a_cycle_is_profiled_by_its_top_level_jobs(tmp_path: Path) -> None:
    st = Store(f"sqlite:///{tmp_path / 'rsi.db'}")
    _job(st, "job-1", "run", ["x"], tmp_path)
    _finish(st, "x", "job-1", FULL, tmp_path, write=True)
    st.finish_job("job-1", "done")
    _clock(st, JobRow, "job-1", created_at=T0, finished_at=at(50))
    _clock(st, TrialRow, "x", started_at=at(5), finished_at=at(45))
    [p] = cp.profile(st, tmp_path)
    assert [ph.name for ph in p.phases] == ["run job-1"] and p.wall_sec == 50 and p.trials == 1
    assert {s["step"]: s["wall_sec"] for s in p.as_json()["steps"]}["model decode"] == pytest.approx(6)


def test_a_trial_records_its_finer_spans(tmp_path: Path) -> None:
    """An oracle trial at the snapshot level (fake provider): the container spans, the agent's sandbox time and the
    verifier's start / run / removal are recorded, and they add up inside the coarse spans."""
    from rsi.core.arm import Arm, TrialSpec, make_trial_id
    from rsi.core.contract import Contract
    from rsi.exec.trial import TrialEnv, run_trial
    from rsi.harness.builtin import load_agents
    from rsi.sandbox.fake import FakeSandboxProvider
    from rsi.store.files import load_task
    from tests.taskgen import make_task

    load_agents()
    task_dir = make_task(tmp_path / "tasks", "t")
    task = load_task(task_dir)
    arm = Arm(agent="oracle", generation="gen-0000")
    spec = TrialSpec(trial_id=make_trial_id("job-p", task.name, arm, 1), job_id="job-p", task_name=task.name,
                     task_digest=task.digest, task_path=str(task_dir), arm=arm, attempt=1,
                     trial_dir=str(tmp_path / "trial"))
    contract = Contract.model_validate({"hcp": "1.0.0", "substrate": {"tools": {}},
                                        "grading": {"agent_services": "stopped"}})
    r = run_trial(spec, TrialEnv(provider=FakeSandboxProvider(tmp_path / "sb"), contract=contract, base_image="b"))
    t = r.timings
    assert r.passed and r.integrity == "snapshot", r.error_message
    assert 0 < t.sandbox_exec <= t.agent and t.model == 0
    assert t.commit > 0 and t.agent_remove > 0 and t.commit + t.agent_remove <= t.snapshot
    assert t.verify_start > 0 and t.verify_exec > 0 and t.verify_remove > 0
    assert t.verify_start + t.verify_exec + t.verify_remove <= t.verify
    steps = cp.trial_steps(t.model_dump())
    assert steps["agent sandbox exec"] == t.sandbox_exec and steps["agent (not split)"] == 0
    assert t.record > 0 and sum(steps.values()) == pytest.approx(t.total + t.record)


def test_the_servers_prefill_and_decode_seconds_reach_the_client() -> None:
    import httpx

    from rsi.models.client import ChatClient
    from rsi.models.server.decode import GenResult, timing_headers

    got = [GenResult(text="a", tool_calls=[], finish_reason="stop", prompt_tokens=3, completion_tokens=1,
                     queue_sec=0.5, prefill_sec=0.25, decode_sec=1.5),
           GenResult(text="b", tool_calls=[], finish_reason="stop", prompt_tokens=3, completion_tokens=1,
                     prefill_sec=0.125, decode_sec=2.0)]
    headers = timing_headers(got)  # the slowest choice's
    assert headers == {"X-Queue-Seconds": "0.500", "X-Prefill-Seconds": "0.2500", "X-Decode-Seconds": "2.0000"}
    body = {"model": "m", "choices": [{"message": {"content": "hi"}, "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 1}}
    with ChatClient("http://m.test/v1", transport=httpx.MockTransport(
            lambda r: httpx.Response(200, json=body, headers=headers))) as c:
        res = c.chat("m", [{"role": "user", "content": "x"}])
    assert (res.queue_sec, res.prefill_sec, res.decode_sec) == (0.5, 0.25, 2.0)
    with ChatClient("http://m.test/v1", transport=httpx.MockTransport(lambda r: httpx.Response(200, json=body))) as c:
        res = c.chat("m", [{"role": "user", "content": "x"}])
    assert (res.prefill_sec, res.decode_sec) == (0.0, 0.0)  # a server that does not say (vLLM)
