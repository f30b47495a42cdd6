"""`rsi expand` against real Docker and a real local HTTP policy server that misbehaves on purpose.

Three tasks whose ground truth is known (benchmarks/policy_server.py): `easy` (any config solves
it), `cold` (only sampling.temperature=0.2) and `never` (no config). The endpoint answers 503 for
a while, and a container is killed mid-trial: both are infra (retried), never a model or config
verdict, and the verdicts come out as the ground truth says. The same for the Docker daemon going
away mid-job, twice: simulated per provider (DaemonOutage: calls refused for a while, containers
stopped) and a real `dockerd` restart (SIGTERM, then the same command line again). Then a
`kill -9`-style stop mid-search and `--resume`: every trial recorded once, the budget's spent
figure equal to the trials recorded, no container left.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from benchmarks.policy_server import CONFIG, Policy, rule_for, serve
from rsi.core.trial import is_infra
from rsi.exec.trial import TrialEnv
from rsi.loop.context import WorkspaceContext
from rsi.loop.expand.phase import ExpandRequest, expand
from rsi.loop.init import init_workspace
from rsi.sandbox.base import SandboxSpec
from rsi.sandbox.docker import DockerSandboxProvider
from rsi.sandbox.docker_sandbox import DockerSandbox
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
def ctx(tmp_path: Path, policy: tuple[Policy, str], docker_ready: None,
        request: pytest.FixtureRequest) -> Iterator[WorkspaceContext]:
    root = tmp_path / "ws"
    (root / "harness_configs").mkdir(parents=True)
    cfg = CONFIG.format(endpoint=policy[1])
    timeout = getattr(request, "param", None)  # a test's model.request_timeout_sec
    if timeout is not None:
        cfg = cfg.replace("request_timeout_sec: 10", f"request_timeout_sec: {timeout}")
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
    out = expand(ctx, ExpandRequest(explore=1, budget=30, attempts=1, concurrency=2, proposals=0, trial_env_hook=_fast))
    assert not out.interrupted, out.reason
    assert state["killed"], "no container was killed mid-trial"
    trials = [t for j in ctx.store.child_jobs(out.job_id) for t in ctx.store.trials(j.id)]
    killed = next(t for t in trials if t.id == state["killed"])
    # the killed trial's attempt is on record as infra and the trial was re-run to a real outcome
    assert killed.infra_attempts or is_infra(killed.error_type) or killed.infra_retries, killed
    kinds = {a.task_name: (a.kind, a.variant) for a in ctx.store.attributions("gen-0000")}
    assert kinds == {"cold": ("config", "sampling.temperature=0.2"), "never": ("model", None)}, kinds
    assert out.coverage["solved"] == 2 and out.budget["spent"]["all"] == out.trials


@pytest.mark.parametrize("ctx", [1], indirect=True)
def test_an_endpoint_that_times_out_for_a_while_is_infra(ctx: WorkspaceContext, policy: tuple[Policy, str]) -> None:
    """The endpoint hangs past the client's timeout on five calls in a row: more than the client's
    own retries, so a trial attempt ends on an infra error, is recorded as such and re-run; no
    verdict comes from it and the verdicts are the ground truth."""
    p = policy[0]
    p.stalls, p.stall_sec = 5, 2.5
    out = expand(ctx, ExpandRequest(explore=1, budget=30, attempts=1, concurrency=1, proposals=0, trial_env_hook=_fast))
    assert not out.interrupted, out.reason
    assert p.stalls == 0, "the endpoint never hung"
    trials = [t for j in ctx.store.child_jobs(out.job_id) for t in ctx.store.trials(j.id)]
    hung = [t for t in trials if t.infra_attempts]
    assert hung, "no trial attempt was recorded as infra"
    assert all(t.status == "done" and not is_infra(t.error_type) for t in hung), "a hung trial was not re-run"
    assert any("timed out" in str(a).lower() or "timeout" in str(a).lower() or "unavailable" in str(a).lower()
               for t in hung for a in t.infra_attempts)
    kinds = {a.task_name: (a.kind, a.variant) for a in ctx.store.attributions("gen-0000")}
    assert kinds == {"cold": ("config", "sampling.temperature=0.2"), "never": ("model", None)}, kinds
    assert out.baseline.tasks_solved == 1 and out.coverage["solved"] == 2


def test_expand_stopped_mid_search_resumes_each_trial_once(ctx: WorkspaceContext) -> None:
    out = expand(ctx, ExpandRequest(explore=1, budget=7, attempts=1, concurrency=2, proposals=0, trial_env_hook=_fast))
    assert out.interrupted and "budget" in (out.reason or "")
    with ctx.store.session() as s:  # what kill -9 leaves: the job 'running', its owner gone
        job = s.get(JobRow, out.job_id)
        assert job is not None
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


class DaemonOutage(DockerSandboxProvider):
    """The docker provider, with the daemon going away for a while as a `dockerd` restart does it,
    for this provider only (restarting the real daemon would hit everything else running on it).

    `begin()` does what a daemon shutdown does to the containers it runs (without live-restore):
    stops each running container of this provider with `docker stop` (SIGTERM to the init, SIGKILL
    after a grace), through a separate client. Then for `seconds` every request this provider's
    client sends fails the way it fails while the daemon is down: it is sent to a docker client whose
    unix socket does not exist, so the SDK raises its own `requests.exceptions.ConnectionError`
    (also for calls that bypass rsi's retry wrapper, and for exec streams). Afterwards the requests
    reach the daemon again and the stopped containers are there, exited, as after a restart.
    """

    def __init__(self, sock_dir: Path, seconds: float = 4.0) -> None:
        import docker

        client = docker.from_env()
        super().__init__(client=client)
        self.seconds, self.began_at, self.ended_at = seconds, 0.0, 0.0
        self.refused, self.stopped, self.ours = 0, [], []  # type: ignore[var-annotated]
        self._side = docker.from_env().api
        dead = docker.APIClient(base_url=f"unix://{sock_dir}/docker.sock", version=client.api.api_version)
        real = client.api.send
        lock = threading.Lock()

        def send(request: Any, **kw: Any) -> Any:
            if self.began_at <= time.monotonic() < self.ended_at:
                with lock:
                    self.refused += 1
                return dead.send(request, **kw)
            return real(request, **kw)

        client.api.send = send  # type: ignore[method-assign]

    def start(self, spec: SandboxSpec) -> DockerSandbox:
        sb = super().start(spec)
        self.ours.append(sb.id)
        return sb

    def begin(self) -> None:
        if self.began_at:
            return
        self.began_at = time.monotonic()  # requests fail from now on, while the containers go down
        self.ended_at = self.began_at + 3600
        for cid in list(self.ours):
            if self._side.inspect_container(cid)["State"]["Running"]:
                self._side.stop(cid, timeout=2)
                self.stopped.append(cid)
        self.ended_at = time.monotonic() + self.seconds


@pytest.mark.parametrize("during_model_call", [False, True], ids=["calls-refused", "restart-unnoticed"])
def test_docker_daemon_outage_mid_job_is_infra_and_retried(
    ctx: WorkspaceContext, policy: tuple[Policy, str], tmp_path: Path, during_model_call: bool
) -> None:
    """calls-refused: the trials' next daemon calls fail while the daemon is away (4 s);
    restart-unnoticed: the daemon is back (1 s) before the trial, waiting on the model, calls it
    again; it only finds its container stopped."""
    outage = DaemonOutage(tmp_path, seconds=1.0 if during_model_call else 4.0)

    def hook(n: int, body: dict[str, Any]) -> None:
        if n == 3:  # mid-trial, a container up
            outage.begin()
            if during_model_call:
                time.sleep(max(0.0, outage.ended_at - time.monotonic()) + 0.2)

    policy[0].on_call = hook
    out = expand(ctx, ExpandRequest(explore=1, budget=30, attempts=1, concurrency=2, proposals=0, provider=outage,
                                    trial_env_hook=_fast))
    assert not out.interrupted, out.reason
    assert outage.stopped and (during_model_call or outage.refused > 0), "the outage hit nothing"
    trials = [t for j in ctx.store.child_jobs(out.job_id) for t in ctx.store.trials(j.id)]
    hit = [t for t in trials if t.infra_attempts or is_infra(t.error_type)]
    assert hit, "no trial saw the outage"
    # none of it is blamed on the agent, the model or a config
    bad = [(t.id, t.error_type, t.error_message) for t in trials
           if t.error_type and not is_infra(t.error_type)]
    assert not bad, bad
    kinds = {a.task_name: (a.kind, a.variant) for a in ctx.store.attributions("gen-0000")}
    assert kinds == {"cold": ("config", "sampling.temperature=0.2"), "never": ("model", None)}, kinds
    assert out.coverage["solved"] == 2 and out.budget["spent"]["all"] == out.trials
    # the containers the daemon stopped, whose removal failed while it was away, are gone by the job's end
    jobs = {j.id for j in ctx.store.child_jobs(out.job_id)}
    left = [c["Id"][:12] for c in rsi_containers(outage._side) if c["Labels"].get("rsi.job") in jobs]
    assert not left, left


def _restart_dockerd() -> float:
    """Stop the real `dockerd` with SIGTERM (without live-restore its containers go down with it) and
    start it again with the same command line, as an operator's restart does; the seconds it was away."""
    import os
    import signal
    import subprocess

    import docker

    pids = subprocess.run(["pgrep", "-xo", "dockerd"], capture_output=True, text=True).stdout.split()
    assert pids, "no dockerd process on this machine to restart"
    pid = int(pids[0])
    argv = [a.decode() for a in Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0") if a]
    began = time.monotonic()
    os.kill(pid, signal.SIGTERM)
    while Path(f"/proc/{pid}").exists() and time.monotonic() - began < 60:
        time.sleep(0.1)
    assert not Path(f"/proc/{pid}").exists(), "dockerd did not stop within 60 s"
    with open("/var/log/rsi-dockerd.log", "ab") as log:
        subprocess.Popen(argv, stdout=log, stderr=log, start_new_session=True)
    while time.monotonic() - began < 90:
        try:
            docker.from_env().ping()
            return time.monotonic() - began
        except Exception:  # noqa: BLE001 - not up yet
            time.sleep(0.2)
    raise AssertionError("dockerd did not come back within 90 s")


def test_a_real_docker_daemon_restart_mid_job_is_infra_and_retried(
    ctx: WorkspaceContext, policy: tuple[Policy, str]
) -> None:
    """The real daemon is restarted while a trial waits on the model: its container is gone when the
    trial's next command runs. rsi's event watch saw the daemon go away, so that end is infra (retried),
    not the agent's; nothing is blamed on the model or a config, and no container is left."""
    import docker

    away: list[float] = []

    def hook(n: int, body: dict[str, Any]) -> None:
        if n == 3 and not away:  # mid-trial: containers up, the trial waiting on this model call
            away.append(_restart_dockerd())

    policy[0].on_call = hook
    out = expand(ctx, ExpandRequest(explore=1, budget=30, attempts=1, concurrency=2, proposals=0, trial_env_hook=_fast))
    assert away, "the daemon was never restarted"
    assert not out.interrupted, out.reason
    trials = [t for j in ctx.store.child_jobs(out.job_id) for t in ctx.store.trials(j.id)]
    hit = [t for t in trials if t.infra_attempts or is_infra(t.error_type) or t.infra_retries]
    assert hit, "no trial saw the restart"
    bad = [(t.id, t.error_type, t.error_message) for t in trials if t.error_type and not is_infra(t.error_type)]
    assert not bad, bad
    kinds = {a.task_name: (a.kind, a.variant) for a in ctx.store.attributions("gen-0000")}
    assert kinds == {"cold": ("config", "sampling.temperature=0.2"), "never": ("model", None)}, kinds
    assert out.coverage["solved"] == 2 and out.budget["spent"]["all"] == out.trials
    jobs = {j.id for j in ctx.store.child_jobs(out.job_id)}
    left = [c["Id"][:12] for c in rsi_containers(docker.from_env().api) if c["Labels"].get("rsi.job") in jobs]
    assert not left, left
