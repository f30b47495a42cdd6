"""`rsi expand` on FakeSandboxProvider and the deterministic policy server (benchmarks/policy_server.py).

Each task names the harness-config values under which the policy solves it, so every verdict,
the coverage and the adopted config are known in advance.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from benchmarks.policy_server import CONFIG, Policy, rule_for, serve
from rsi.core.errors import ConfigError, InputError
from rsi.core.trial import is_infra
from rsi.exec.trial import TrialEnv
from rsi.loop.context import WorkspaceContext
from rsi.loop.expand.evidence import Pool
from rsi.loop.expand.outcome import FALLBACK, preflight
from rsi.loop.expand.phase import ExpandRequest, expand, pool_tasks
from rsi.loop.init import init_workspace
from rsi.sandbox.fake import FakeSandboxProvider
from rsi.store.tables import JobRow
from tests.taskgen import make_task

RULES = {"easy": {}, "cold": rule_for({"temperature": 0.2}), "long": rule_for({"turns": 8}),
         "never": None, "broken": None}


class ScriptedReflector:
    def __init__(self, answers: list[str]) -> None:
        self.answers = answers
        self.prompts: list[str] = []

    def propose(self, prompt: str, seed: int) -> str:
        self.prompts.append(prompt)
        return self.answers[len(self.prompts) - 1] if len(self.prompts) <= len(self.answers) else "{}"


def _fast(env: TrialEnv) -> None:
    env.retry_wait_initial = 0.01


@pytest.fixture
def policy() -> Iterator[tuple[Policy, str]]:
    p = Policy(rules=dict(RULES))
    with serve(p) as url:
        yield p, url


@pytest.fixture
def ctx(tmp_path: Path, policy: tuple[Policy, str]) -> Iterator[WorkspaceContext]:
    root = tmp_path / "ws"
    (root / "harness_configs").mkdir(parents=True)
    (root / "harness_configs" / "default.yaml").write_text(CONFIG.format(endpoint=policy[1]))
    init_workspace(root, starter_tasks=False)
    for name in RULES:  # `broken`: the reference solution writes the wrong answer, so the task is to blame
        if name == "broken":
            make_task(root / "tasks", name, solve='echo no > "${SANDBOX_ROOT:-}/app/out.txt"\n')
        else:
            make_task(root / "tasks", name)
    c = WorkspaceContext.open(root)
    yield c
    c.store.close()


def _req(provider: FakeSandboxProvider, **kw: object) -> ExpandRequest:
    base: dict[str, object] = {"budget": 60, "attempts": 1, "concurrency": 2, "proposals": 0, "provider": provider,
                               "trial_env_hook": _fast, "fewshot": 0,  # few-shot: tests/unit/test_expand_fewshot.py
                               "explore": 1}  # the fake world is deterministic: a second look never passes
    return ExpandRequest(**{**base, **kw})  # type: ignore[arg-type]


def test_expand_attributes_searches_and_adopts(ctx: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    out = expand(ctx, _req(provider))
    assert not out.interrupted, out.reason
    kinds = {a.task_name: (a.kind, a.variant) for a in ctx.store.attributions("gen-0000")}
    assert kinds["broken"][0] == "task"
    assert kinds["cold"] == ("config", "sampling.temperature=0.2")
    assert kinds["long"] == ("config", "loop.max_turns=8")
    assert kinds["never"][0] == "model" and "easy" not in kinds
    never = next(a for a in ctx.store.attributions("gen-0000") if a.task_name == "never")
    assert never.confidence > 0.9 and len(never.evidence) >= 3  # oracle x2, nop, baseline, every variant
    assert out.baseline.tasks_solved == 1 and out.coverage["solved"] == 3 and out.tasks == 5
    # no single variant solves both cold and long: the best single config solves 2 of 5
    assert out.best.tasks_solved == 2 and out.best.full_split
    # ... but one task won against the baseline is noise (one-sided sign test, p = 0.5): the baseline stays
    # (test_adopted_config_loads_back has a pool where a config wins beyond noise)
    assert out.best.label in {"sampling.temperature=0.2", "loop.max_turns=8"} and out.best.p_value == 0.5
    assert out.adopted["label"] == "baseline" and not out.adopted["new"]
    assert out.front["cold"] == ["sampling.temperature=0.2"] and out.front["never"] == []
    # the budget's figures are the trials actually recorded
    assert out.budget["spent"]["all"] == out.trials
    assert out.best.ci[0] < out.best.rate < out.best.ci[1]
    # ... and every one of them is counted at the level it was graded at (these tasks declare no reads)
    assert out.integrity == {"declared_outputs": 0, "snapshot": out.trials, "shared": 0, "none": 0}
    assert out.as_json()["integrity"] == out.integrity
    from rsi.cli.common import console
    from rsi.cli.expand import render

    with console.capture() as cap:
        render(out)
    assert f"declared_outputs 0, snapshot {out.trials}, shared 0" in cap.get()


def test_preflight_refuses_a_budget_below_the_baseline(ctx: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    with pytest.raises(InputError, match="minimum that works is 10"):
        expand(ctx, _req(provider, budget=5, attempts=2))
    assert not [j for j in ctx.store.list_jobs() if j.kind == "expand"]


@pytest.mark.parametrize(("kw", "flag"), [
    ({"budget": 0}, "--budget"), ({"unit": "hours"}, "--unit"), ({"strategy": "bandit"}, "--strategy"),
    ({"attempts": 0}, "--attempts"), ({"concurrency": 0}, "--concurrency"), ({"proposals": -1}, "--proposals"),
])
def test_bad_settings_are_refused_before_any_trial(ctx: WorkspaceContext, provider: FakeSandboxProvider,
                                                    kw: dict[str, Any], flag: str) -> None:
    with pytest.raises(InputError) as err:
        expand(ctx, _req(provider, **kw))
    assert err.value.args and flag in str(err.value)
    assert not ctx.store.list_jobs() and provider.builds == 0  # nothing planned, nothing built or run


def test_a_tight_budget_keeps_half_for_the_search(ctx: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    """Baseline 5; 4 failed tasks want 12 controls, but only half of the 10 left may go to them:
    one oracle run per task first (which puts `broken` out of the search), then a nop."""
    messages: list[str] = []
    from rsi.loop.hooks import ExpandHooks

    class Hooks(ExpandHooks):
        def message(self, text: str) -> None:
            messages.append(text)

    from rsi.loop.expand.sources import SourcesPlan

    # no training-data sources: this is the controls' share against the search's (the sources get their own
    # half of what the controls leave, tests/unit/test_sources.py)
    out = expand(ctx, _req(provider, budget=15, sources=SourcesPlan(replays=0, hints=())), Hooks())
    assert out.budget["spent"]["attribution"] == 5 and out.budget["spent"]["search"] == 5
    assert out.interrupted and out.complete, "the search spending the budget is the usual, final end"
    assert ctx.store.get_job(out.job_id).status == "done"
    assert any("attribution controls 5 trial(s)" in m and "more once the search is done" in m for m in messages)
    kinds = {a.task_name: a for a in ctx.store.attributions("gen-0000")}
    assert kinds["broken"].kind == "task" and {kinds[t].kind for t in ("cold", "long", "never")} <= {"model", "config"}
    assert all("the contract asks 2" in kinds[t].reason for t in ("cold", "long", "never") if kinds[t].kind == "model")
    search = [t for j in ctx.store.child_jobs(out.job_id) if (j.params or {}).get("part") == "search"
              for t in ctx.store.trials(j.id)]
    assert search and all(t.task_name != "broken" for t in search)


def test_controls_recorded_under_no_generation_are_reused(ctx: WorkspaceContext,
                                                          provider: FakeSandboxProvider) -> None:
    """`rsi run --agent oracle` (and discovery's gate) ran the reference solutions already: the
    oracle calls no model, so those runs are the controls, whatever generation they were under."""
    from rsi.loop.run import RunRequest, run_job

    run_job(ctx, RunRequest(paths=[ctx.ws.tasks_dir], agent="oracle", attempts=2, concurrency=2),
            provider=provider, trial_env_hook=_fast)
    out = expand(ctx, _req(provider, budget=40))
    assert out.budget["spent"]["attribution"] == 4  # the nops only: every oracle run was reused
    never = next(a for a in ctx.store.attributions("gen-0000") if a.task_name == "never")
    assert never.kind == "model" and sum(".oracle" in e or "oracle-" in e for e in never.evidence) == 2


def test_baseline_reuses_finished_trials(ctx: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    first = expand(ctx, _req(provider, budget=5))  # the baseline only (5 tasks x 1)
    assert first.interrupted and first.trials == 5
    assert not first.complete, "a budget spent before attribution and search is not a final outcome"
    assert ctx.store.get_job(first.job_id).status == "interrupted"
    second = expand(ctx, _req(provider, budget=30))
    assert second.baseline.attempts == 5
    children = ctx.store.child_jobs(second.job_id)
    base = [t for j in children if j.params["stage"] == "baseline" for t in ctx.store.trials(j.id)]
    assert base == [], "the baseline was paid twice"


def test_budget_stop_then_resume_with_more(ctx: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    out = expand(ctx, _req(provider, budget=12))
    assert out.interrupted and "budget" in (out.reason or "")
    assert out.complete == (out.budget["spent"]["search"] > 0)
    assert out.budget["spent"]["all"] == out.trials <= 12
    with pytest.raises(ConfigError, match="other settings"):
        expand(ctx, _req(provider, resume=out.job_id, strategy="random"))
    with pytest.raises(ConfigError, match=r"other settings \(fewshot\)"):  # refused, never silently ignored
        expand(ctx, _req(provider, resume=out.job_id, fewshot=3))
    again = expand(ctx, _req(provider, resume=out.job_id, budget=60))
    assert not again.interrupted and again.coverage["solved"] == 3
    ids = [t.id for j in ctx.store.child_jobs(out.job_id) for t in ctx.store.trials(j.id)]
    assert len(ids) == len(set(ids)) and again.budget["spent"]["all"] == again.trials


def test_resume_after_kill_records_every_trial_once(ctx: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    out = expand(ctx, _req(provider, budget=14))
    # what a kill -9 leaves: the expand job 'running' with no owner
    with ctx.store.session() as s:
        job = s.get(JobRow, out.job_id)
        assert job is not None
        job.status, job.owner_pid = "running", None
        s.add(job)
        s.commit()
    again = expand(ctx, _req(provider, resume=out.job_id, budget=60))
    assert not again.interrupted
    trials = [t for j in ctx.store.child_jobs(out.job_id) for t in ctx.store.trials(j.id)]
    assert all(t.status == "done" for t in trials)
    assert again.budget["spent"]["all"] == len(trials) == again.trials


def test_reflective_proposals_are_checked_and_refusals_recorded(
    ctx: WorkspaceContext, provider: FakeSandboxProvider
) -> None:
    r = ScriptedReflector(["```yaml\nloop.max_turns: 99\n```", "sampling:\n  temperature: 0.2\n", "not: [yaml"])
    out = expand(ctx, _req(provider, proposals=3, reflector=r))
    rows = {c.label: c for c in ctx.store.search_candidates(out.job_id) if c.origin == "reflection"}
    refused = [c for c in rows.values() if c.state == "refused"]
    assert any("max_turns" in (c.reason or "") for c in refused), [c.reason for c in refused]
    assert len(r.prompts) == 3 and "Task " in r.prompts[0]
    ok = [c for c in rows.values() if c.state != "refused"]
    assert ok and ok[0].config_digest is not None
    assert {c.origin for c in ctx.store.search_candidates(out.job_id)} == {"search_space", "reflection"}
    # a refused proposal never ran a trial
    variants = {t.variant for j in ctx.store.child_jobs(out.job_id) for t in ctx.store.trials(j.id)}
    assert not any(c.label in variants for c in refused)


def test_endpoint_errors_are_infra_never_a_verdict(
    ctx: WorkspaceContext, provider: FakeSandboxProvider, policy: tuple[Policy, str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from rsi.models.client import ChatClient

    monkeypatch.setattr(ChatClient, "BACKOFF_INITIAL", 0.02)  # the retries are what is tested, not their waits
    policy[0].faults = [500] * 400  # the endpoint is down for the whole first run
    out = expand(ctx, _req(provider, budget=20))
    kinds = {a.kind for a in ctx.store.attributions("gen-0000")}
    assert kinds <= {"infra", "task"}, kinds  # never model/config from failed calls
    assert out.budget["spent"]["all"] == out.trials and out.infra_trials > 0
    policy[0].faults = []
    again = expand(ctx, _req(provider, resume=out.job_id, budget=60))
    kinds2 = {a.task_name: a.kind for a in ctx.store.attributions("gen-0000")}
    assert kinds2["cold"] == "config" and kinds2["never"] == "model", (again.reason, kinds2)


def test_adopted_config_loads_back(ctx: WorkspaceContext, provider: FakeSandboxProvider,
                                   policy: tuple[Policy, str], monkeypatch: pytest.MonkeyPatch) -> None:
    for i in range(4):  # five tasks only temperature 0.2 solves: a gain beyond noise (sign test p = 1/32)
        policy[0].rules[f"cold-{i}"] = rule_for({"temperature": 0.2})
        make_task(ctx.ws.tasks_dir, f"cold-{i}")
    out = expand(ctx, _req(provider, budget=90))
    assert out.adopted["label"] == "sampling.temperature=0.2" and out.adopted["new"]
    line = next(c for c in out.configs if c.label == out.adopted["label"])
    assert line.wins == 5 and line.losses == 0 and line.p_value < 0.1
    path = Path(out.adopted["path"])
    assert path.is_file() and out.adopted["digest"] in path.read_text()
    assert [d["path"] for d in out.adopted["diff"]] == ["sampling.temperature"]
    data = yaml.safe_load(path.read_text())
    assert data["name"] == out.adopted["name"] != "policy"
    # the terminal summary shows the test the adoption passed, as the user reads it
    from rich.console import Console

    import rsi.cli.expand as cli_expand
    rec = Console(record=True, width=400)
    monkeypatch.setattr(cli_expand, "console", rec)
    cli_expand.render(out)
    text = rec.export_text()
    assert "better on 5 task(s), worse on 0, one-sided sign test p=0.0312" in text, text


def test_no_gain_keeps_the_baseline_and_writes_no_file(ctx: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    before = sorted(p.name for p in ctx.ws.harness_configs_dir.iterdir())
    out = expand(ctx, _req(provider, tasks="[en]*"))  # easy (the baseline solves it) and never (nothing does)
    assert not out.interrupted, out.reason
    assert out.coverage["solved"] == 1 and out.baseline.tasks_solved == 1
    base = ctx.generation("gen-0000").harness_config
    assert out.adopted["new"] is False and out.adopted["digest"] == base.digest and out.adopted["diff"] == []
    assert "no candidate beat the baseline" in out.adopted["note"]
    assert sorted(p.name for p in ctx.ws.harness_configs_dir.iterdir()) == before
    assert not [c for c in ctx.store.search_candidates(out.job_id) if c.state == "adopted"]


def test_preflight_minutes_come_from_recorded_trials(ctx: WorkspaceContext, provider: FakeSandboxProvider) -> None:
    gen = ctx.generation("gen-0000")
    pool = Pool(tasks=pool_tasks(ctx, None), base_digest=gen.harness_config.digest)
    pre = preflight(ctx, gen.id, pool, 1, "minutes", 10)
    assert pre.estimated and pre.per_trial == FALLBACK["minutes"]
    assert pre.control_estimated and pre.per_control == pre.per_trial  # controls costed like a harness trial
    assert "fallback estimate" in pre.describe()
    expand(ctx, _req(provider, budget=12))  # the baseline (5 trials) and some oracle/nop controls
    rows = ctx.store.outcomes("expand", generation=gen.id, agent="harness")
    ctl = [t for a in ("oracle", "nop") for t in ctx.store.outcomes("expand", generation=gen.id, agent=a)]
    assert rows and ctl
    pre = preflight(ctx, gen.id, pool, 1, "minutes", 10)
    assert not pre.estimated and pre.recorded == len(rows)
    assert pre.per_trial == pytest.approx(sum(t.t_total for t in rows) / len(rows) / 60)
    assert not pre.control_estimated and pre.per_control == pytest.approx(sum(t.t_total for t in ctl) / len(ctl) / 60)
    assert f"mean of {len(rows)} recorded harness trial(s)" in pre.describe()
    assert pre.baseline_trials == 0 and pre.reused == 5  # the baseline is recorded: nothing left to pay
    # 4 failed tasks x (2 oracle runs + 1 nop); what is recorded is not planned again
    assert pre.controls_reused == len(ctl) and pre.control_trials + pre.controls_reused == 4 * 3
    # a resume's plan takes off what the job spent already: 60 - 12 spent - the controls left
    pre = preflight(ctx, gen.id, pool, 1, "trials", 60, spent=12)
    assert f"search ~{60 - 12 - pre.control_trials} trials of 60, 12 spent already" in pre.describe()


KILL_SCRIPT = """
import sys
from pathlib import Path
sys.path.insert(0, {repo!r})
from rsi.loop.context import WorkspaceContext
from rsi.loop.expand.phase import ExpandRequest, expand
from rsi.sandbox.fake import FakeSandboxProvider

def fast(env):
    env.retry_wait_initial = 0.01

prov = FakeSandboxProvider(Path({tmp!r}) / "fake")
ctx = WorkspaceContext.open(Path({root!r}))
req = ExpandRequest(budget={budget}, attempts=1, concurrency=2, proposals=0, round_size=4, provider=prov,
                    trial_env_hook=fast, resume={resume!r})
out = expand(ctx, req)
print("DONE", out.job_id, out.interrupted, out.trials, out.budget["spent"]["all"], len(prov.live))
"""


def test_kill_9_mid_search_then_resume_records_every_trial_once(
    ctx: WorkspaceContext, policy: tuple[Policy, str], tmp_path: Path
) -> None:
    """A real `kill -9` of a process running expand (fake sandboxes, the policy server slowed to
    0.3 s a call so a search round is in flight), then `--resume` in a new process."""
    import os
    import signal
    import subprocess
    import sys
    import time

    policy[0].on_call = lambda n, body: time.sleep(0.3)
    repo, root = str(Path(__file__).resolve().parents[2]), str(ctx.ws.root)

    def start(resume: str | None, budget: int) -> subprocess.Popen[str]:
        code = KILL_SCRIPT.format(repo=repo, tmp=str(tmp_path), root=root, resume=resume, budget=budget)
        return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env={**os.environ, "RSI_HOME": root})

    def mid_round() -> bool:  # a search round with some trials finished and some not
        for j in ctx.store.list_jobs():
            if j.parent_job and str(j.params.get("stage", "")).startswith("search-"):
                states = {t.status == "done" for t in ctx.store.trials(j.id)}
                if states == {True, False}:
                    return True
        return False

    proc = start(None, 40)
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline and not mid_round() and proc.poll() is None:
        time.sleep(0.05)
    assert proc.poll() is None, "expand finished before it could be killed: " + proc.communicate()[1][-2000:]
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    (job,) = [j for j in ctx.store.list_jobs() if j.kind == "expand"]
    assert ctx.store.get_job(job.id).status == "running"  # what a kill -9 leaves behind
    children = {j.id: j.params["stage"] for j in ctx.store.child_jobs(job.id)}
    planned = {t.id: t.job_id for j in children for t in ctx.store.trials(j)}
    finished = {t.id: t.finished_at for j in children for t in ctx.store.trials(j) if t.status == "done"}
    assert any(s.startswith("search-") for s in children.values()) and len(finished) < len(planned)

    again = start(job.id, 40)
    out, err = again.communicate(timeout=300)
    assert again.returncode == 0, err[-3000:]
    done_line = next(line for line in out.splitlines() if line.startswith("DONE")).split()
    assert done_line[1] == job.id and done_line[5] == "0"  # no sandbox left running
    trials = [t for j in ctx.store.child_jobs(job.id) for t in ctx.store.trials(j.id)]
    assert len(trials) == len({t.id for t in trials}) and all(t.status == "done" for t in trials)
    by_id = {t.id: t for t in trials}
    assert all(i in by_id and by_id[i].job_id == j for i, j in planned.items())  # each planned trial, once
    for i, at in finished.items():  # a trial finished before the kill was not run again
        assert by_id[i].finished_at == at
    counted = sum(1 for t in trials if not is_infra(t.error_type))
    assert int(done_line[3]) == counted and float(done_line[4]) == counted <= 40
    assert ctx.store.get_job(job.id).status in ("done", "interrupted")


class ProposerServer:
    """A real OpenAI-compatible HTTP server standing for a configured proposer endpoint: it answers
    the first call with a 503 (the client retries it), then each proposer call with the next fixed
    answer, and keeps every request body."""

    def __init__(self, answers: list[str]) -> None:
        import http.server
        import json
        import threading

        self.answers = list(answers)
        self.bodies: list[dict[str, Any]] = []
        self.faults = [503]
        me = self

        class Handler(http.server.BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: object) -> None:
                pass

            def do_POST(self) -> None:  # noqa: N802
                body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
                payload: dict[str, Any]
                if me.faults:
                    status, payload = me.faults.pop(0), {"error": {"message": "overloaded"}}
                else:
                    me.bodies.append(body)
                    text = me.answers.pop(0) if me.answers else "no idea"
                    status, payload = 200, {
                        "id": "c", "object": "chat.completion", "model": body.get("model"),
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": text}}],
                        "usage": {"prompt_tokens": 100, "completion_tokens": 20, "total_tokens": 120}}
                data = json.dumps(payload).encode()
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

        self.srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.srv.server_address[1]}/v1"
        threading.Thread(target=self.srv.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.srv.shutdown()
        self.srv.server_close()


def test_reflective_proposals_from_a_configured_proposer_endpoint(
    ctx: WorkspaceContext, provider: FakeSandboxProvider
) -> None:
    """`expand.proposer` in rsi.yaml names a real HTTP endpoint; its first proposal loosens the
    contract's max_turns and is refused and recorded, its second (temperature 0.2, and a max_tokens
    the policy ignores, so a config of its own) becomes a candidate that fixes `cold`. The proposer
    only proposes: the verdicts still come from trials."""
    server = ProposerServer(["```yaml\nloop:\n  max_turns: 99\n```",
                             "```yaml\nsampling:\n  temperature: 0.2\n  max_tokens: 48\n```"])
    try:
        settings = ctx.ws.settings_path
        data = yaml.safe_load(settings.read_text()) if settings.is_file() else {}
        data["expand"] = {"proposer": {"endpoint": server.url, "model": "critic", "temperature": 0.0}}
        settings.write_text(yaml.safe_dump(data))
        out = expand(ctx, _req(provider, proposals=2, tasks="[cen]*"))
    finally:
        server.close()
    assert not out.interrupted, out.reason
    assert len(server.bodies) == 2 and all(b["model"] == "critic" and b["temperature"] == 0.0 for b in server.bodies)
    prompt = server.bodies[0]["messages"][0]["content"]
    assert "You tune the harness config" in prompt and "Task " in prompt and "max_turns" in prompt
    rows = {c.label: c for c in ctx.store.search_candidates(out.job_id) if c.origin == "reflection"}
    (refused,) = [c for c in rows.values() if c.state == "refused"]
    assert refused.label == "reflection-1" and "max_turns" in (refused.reason or "") and refused.config_digest is None
    assert refused.patch_yaml and "99" in refused.patch_yaml and refused.source_trial
    assert [r["label"] for r in out.refused] == ["reflection-1"]
    (ok,) = [c for c in rows.values() if c.state != "refused"]
    assert ok.label.startswith("reflection-2:") and "sampling.temperature=0.2" in ok.label
    stored = ctx.config_by_digest(ok.config_digest or "")
    assert stored.sampling.temperature == 0.2 and stored.sampling.max_tokens == 48
    assert "cold" in ok.tasks_solved
    kinds = {a.task_name: a.kind for a in ctx.store.attributions("gen-0000")}
    assert kinds == {"cold": "config", "never": "model"}, kinds
    ran = {t.variant for j in ctx.store.child_jobs(out.job_id) for t in ctx.store.trials(j.id)}
    assert refused.label not in ran and ok.label in ran


def test_a_manual_candidate_is_searched_and_named(ctx: WorkspaceContext, provider: FakeSandboxProvider,
                                                  policy: tuple[Policy, str], tmp_path: Path) -> None:
    """`never` is solved only by two changes at once, which no single-field search_space variant
    makes; the user's own patch (`--candidate`, from a file) does, and the verdict names it."""
    policy[0].rules["never"] = rule_for({"temperature": 0.2, "turns": 8})
    patch = tmp_path / "both.yaml"
    patch.write_text("sampling:\n  temperature: 0.2\nloop:\n  max_turns: 8\n")
    out = expand(ctx, _req(provider, candidates=[str(patch)]))
    label = "manual:loop.max_turns=8,sampling.temperature=0.2"
    rows = {r.label: r for r in ctx.store.search_candidates(out.job_id)}
    assert rows[label].origin == "manual" and rows[label].config_digest
    never = next(a for a in ctx.store.attributions("gen-0000") if a.task_name == "never")
    assert (never.kind, never.variant) == ("config", label)
    assert "never" in out.coverage["covered"]
    with pytest.raises(ConfigError, match="candidates"):
        expand(ctx, _req(provider, resume=out.job_id, candidates=["{sampling.temperature: 1.0}"]))


@pytest.mark.parametrize("spec", ["{loop.max_turns: 100000}", "{model.endpoint: 'http://x/v1'}", "[1, 2]",
                                  "{sampling.temperature: 0.7}", "no-such-file.yaml"])
def test_a_bad_manual_candidate_is_refused_before_any_trial(ctx: WorkspaceContext, provider: FakeSandboxProvider,
                                                            spec: str) -> None:
    with pytest.raises(InputError) as err:
        expand(ctx, _req(provider, candidates=[spec]))
    assert "--candidate" in str(err.value)
    assert not [j for j in ctx.store.list_jobs() if j.kind == "expand"] and not provider.live


def test_explore_below_one_attempt_is_refused_and_the_job_keeps_its_setting(
    ctx: WorkspaceContext, provider: FakeSandboxProvider
) -> None:
    with pytest.raises(InputError, match="--explore"):
        expand(ctx, _req(provider, explore=0))
    out = expand(ctx, _req(provider, explore=2, budget=12))
    assert ctx.store.get_job(out.job_id).params["explore"] == 2
    with pytest.raises(ConfigError, match="explore"):  # a resume may not change how the search explores
        expand(ctx, _req(provider, resume=out.job_id, explore=1))


def test_baseline_per_template_and_no_search_leave_the_sources_every_task(
        ctx: WorkspaceContext, provider: FakeSandboxProvider, policy: tuple[Policy, str]) -> None:
    from rsi.loop.expand.sources import SourcesPlan

    for i in range(3):  # three instances of one template: the baseline needs one, the replays want all three
        name = f"tw-{i}"
        policy[0].rules[name] = None
        toml = (f'version = "1.0"\n\n[task]\nname = "{name}"\n\n[metadata.rsi]\nfamily = "t"\ntemplate = "t/w"\n\n'
                '[agent]\ntimeout_sec = 60\n\n[verifier]\ntimeout_sec = 60\n\n[environment]\ncpus = 1\n')
        make_task(ctx.ws.tasks_dir, name, toml=toml)
    out = expand(ctx, _req(provider, budget=60, baseline_per_template=1, search=False,
                           sources=SourcesPlan(replays=1, hints=(3,), hint_tasks=2)))
    assert not out.interrupted, out.reason
    kids = {j.params.get("stage"): j for j in ctx.store.child_jobs(out.job_id)}
    assert not any(str(k).startswith("search") for k in kids), "no config search"
    base = {t.task_name for t in ctx.store.trials(kids["baseline"].id)}
    assert len(base & {"tw-0", "tw-1", "tw-2"}) == 1 and out.tasks == len(RULES) + 1
    replayed = {t.task_name for t in ctx.store.trials(kids["replays"].id)}
    assert {"tw-0", "tw-1", "tw-2"} <= replayed and len(replayed) == len(RULES) + 3, "every train task replayed"
    assert out.sources["replays"]["trials"] == len(RULES) + 3
    hinted = ctx.store.trials(kids["hinted-3"].id)
    assert len(hinted) == 2 and all(t.agent == "hinted" and t.variant == "hint-3" for t in hinted)
    assert out.sources["hinted"]["hint-3"]["trials"] == 2
    # neither source is the model's score: the baseline's rates count the harness arm alone
    assert out.baseline.attempts == len(RULES) + 1
