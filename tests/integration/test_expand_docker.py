"""`rsi expand` against real Docker and a real local HTTP policy server that misbehaves on purpose.

Three tasks whose ground truth is known (benchmarks/policy_server.py): `easy` (any config solves
it), `cold` (only sampling.temperature=0.2) and `never` (no config). The endpoint answers 503 for
a while, and a container is killed mid-trial: both are infra (retried), never a model or config
verdict, and the verdicts come out as the ground truth says. Then a `kill -9`-style stop mid-search
and `--resume`: every trial recorded once, the budget's spent figure equal to the trials recorded,
no container left.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.policy_server import CONFIG, Policy, rule_for, serve
from rsi.core.trial import is_infra
from rsi.exec.trial import TrialEnv
from rsi.loop.context import WorkspaceContext
from rsi.loop.expand import ExpandRequest, expand
from rsi.loop.init import init_workspace
from rsi.store.tables import JobRow
from tests.integration.conftest import rsi_containers
from tests.taskgen import make_task

pytestmark = [pytest.mark.docker, pytest.mark.timeout(400)]

RULES: dict[str, Any] = {"easy": {}, "cold": rule_for({"temperature": 0.2}), "never": None}


def _fast(env: TrialEnv) -> None:
    env.retry_wait_initial = 0.05


@pytest.fixture
def policy() -> Iterator[tuple[Policy, str]]:
    p = Policy(rules=dict(RULES))
    with serve(p) as url:
        yield p, url


@pytest.fixture
def ctx(tmp_path: Path, policy: tuple[Policy, str], docker_ready: None) -> Iterator[WorkspaceContext]:
    root = tmp_path / "ws"
    (root / "harness_configs").mkdir(parents=True)
    cfg = CONFIG.format(endpoint=policy[1])
    # two candidates keep the test small: temperature 0.2 (fixes `cold`) and max_turns 8 (fixes nothing)
    cfg = cfg[: cfg.index("search_space:")] + "search_space:\n  sampling.temperature: [0.2]\n  loop.max_turns: [8]\n"
    (root / "harness_configs" / "default.yaml").write_text(cfg)
    init_workspace(root, starter_tasks=False)
    for name in RULES:
        make_task(root / "tasks", name)
    c = WorkspaceContext.open(root)
    yield c
    c.store.close()


def _kill_one_container(state: dict[str, Any]) -> Any:
    import docker

    api = docker.from_env().api

    def hook(n: int, body: dict[str, Any]) -> None:
        if state["killed"] or n < state["at"]:
            return
        for c in rsi_containers(api):
            if c["State"] == "running" and c["Labels"].get("rsi.kind", "agent") != "verifier":
                api.kill(c["Id"])
                state["killed"] = c["Labels"].get("rsi.trial")
                return

    return hook


def test_expand_in_docker_with_faults_attributes_from_evidence(
    ctx: WorkspaceContext, policy: tuple[Policy, str]
) -> None:
    p = policy[0]
    p.faults = [503] * 3  # the endpoint answers 503 for a while; the client retries them
    state: dict[str, Any] = {"killed": None, "at": 2}
    p.on_call = _kill_one_container(state)
    out = expand(ctx, ExpandRequest(budget=30, attempts=1, concurrency=2, proposals=0, trial_env_hook=_fast))
    assert not out.interrupted, out.reason
    assert state["killed"], "no container was killed mid-trial"
    trials = [t for j in ctx.store.child_jobs(out.job_id) for t in ctx.store.trials(j.id)]
    killed = next(t for t in trials if t.id == state["killed"])
    # the killed trial's attempt is on record as infra and the trial was re-run to a real outcome
    assert killed.infra_attempts or is_infra(killed.error_type) or killed.infra_retries, killed
    kinds = {a.task_name: (a.kind, a.variant) for a in ctx.store.attributions("gen-0000")}
    assert kinds == {"cold": ("config", "sampling.temperature=0.2"), "never": ("model", None)}, kinds
    assert out.coverage["solved"] == 2 and out.budget["spent"]["all"] == out.trials


def test_expand_stopped_mid_search_resumes_each_trial_once(ctx: WorkspaceContext) -> None:
    out = expand(ctx, ExpandRequest(budget=7, attempts=1, concurrency=2, proposals=0, trial_env_hook=_fast))
    assert out.interrupted and "budget" in (out.reason or "")
    with ctx.store.session() as s:  # what kill -9 leaves: the job 'running', its owner gone
        job = s.get(JobRow, out.job_id)
        job.status, job.owner_pid = "running", None
        s.add(job)
        s.commit()
    again = expand(ctx, ExpandRequest(resume=out.job_id, budget=30, concurrency=2, trial_env_hook=_fast))
    assert not again.interrupted, again.reason
    trials = [t for j in ctx.store.child_jobs(out.job_id) for t in ctx.store.trials(j.id)]
    assert all(t.status == "done" for t in trials) and len({t.id for t in trials}) == len(trials)
    assert again.budget["spent"]["all"] == sum(1 for t in trials if not is_infra(t.error_type)) == again.trials
    import docker

    left = [c for c in rsi_containers(docker.from_env().api)
            if c["Labels"].get("rsi.job", "").startswith("job-") and
            any(c["Labels"].get("rsi.job") == j.id for j in ctx.store.child_jobs(out.job_id))]
    assert not left
