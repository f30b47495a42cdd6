"""Blame against real containers and a real (local, misbehaving on purpose) model server.

Each test runs a small job whose outcome hangs on one blame rule and would come out differently if
the rule broke: an agent that kills its own sandbox is the model's fault (not infra, not retried);
time queued at the model server is not agent time; client retries stop at the agent's budget; a
dead endpoint trips the circuit breaker and a resume finishes the job; a Dockerfile that fails is
the task's fault, a build that cannot reach the network is infra.

The model is a tiny OpenAI-compatible server (`http.server`) in a thread of the test process, with
scripted assistant replies in the text action format (one ```bash block per reply, DONE to finish).
"""

from __future__ import annotations

import http.server
import json
import secrets
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml

from rsi.core.trial import ErrorType, is_infra
from rsi.exec.trial import TrialEnv
from rsi.loop.context import WorkspaceContext
from rsi.loop.init import init_workspace
from rsi.loop.run import JobOutcome, RunRequest, run_job
from rsi.sandbox.base import LABEL_KIND, LABEL_TRIAL
from rsi.sandbox.docker import DockerSandboxProvider
from rsi.store.tables import TrialRow
from tests.taskgen import DOCKERFILE, CountingProvider, make_task

pytestmark = [pytest.mark.docker, pytest.mark.timeout(300)]

MODEL_ID = "SmolLM2-135M-Instruct"
MARK = "RSI-BLAME-OK"  # printed by the healthy reply's command; seen in the next prompt, the model says DONE


def bash(cmd: str) -> str:
    return f"```bash\n{cmd}\n```"


# --- the misbehaving model server -----------------------------------------------------------------

@dataclass
class Reply:
    content: str = "DONE"
    status: int = 200
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)


@dataclass
class FakeModel:
    """What the server answers: `policy(call_index, request_body)` -> Reply. Swappable mid-test."""

    policy: Callable[[int, dict[str, Any]], Reply]
    calls: int = 0
    lock: threading.Lock = field(default_factory=threading.Lock)
    bodies: list[dict[str, Any]] = field(default_factory=list)

    def next(self, body: dict[str, Any]) -> Reply:
        with self.lock:
            i = self.calls
            self.calls += 1
            self.bodies.append(body)
            policy = self.policy
        return policy(i, body)


def scripted(replies: list[str], *, delay: float = 0.0, headers: dict[str, str] | None = None
             ) -> Callable[[int, dict[str, Any]], Reply]:
    """One reply per call in order (DONE once they run out)."""
    def policy(i: int, body: dict[str, Any]) -> Reply:
        return Reply(replies[i] if i < len(replies) else "DONE", delay=delay, headers=dict(headers or {}))
    return policy


def unavailable(delay: float = 0.0) -> Callable[[int, dict[str, Any]], Reply]:
    """Always 503 (after `delay` seconds)."""
    def policy(i: int, body: dict[str, Any]) -> Reply:
        return Reply(json.dumps({"error": {"message": "overloaded (on purpose)"}}), status=503, delay=delay)
    return policy


def healthy(i: int, body: dict[str, Any]) -> Reply:
    """Solves the default task of tests.taskgen in one command, then says DONE."""
    last = str((body.get("messages") or [{}])[-1].get("content") or "")
    return Reply("DONE" if MARK in last else bash(f"echo ok > /app/out.txt && echo {MARK}"))


class _Handler(http.server.BaseHTTPRequestHandler):
    server: _Server

    def log_message(self, format: str, *args: Any) -> None:  # quiet
        pass

    def _send(self, status: int, payload: dict[str, Any] | str, headers: dict[str, str] | None = None) -> None:
        data = (payload if isinstance(payload, str) else json.dumps(payload)).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, v)
        self.end_headers()
        self.wfile.write(data)

    def do_GET(self) -> None:  # noqa: N802
        if self.path.rstrip("/") == "/v1/models":
            self._send(200, {"object": "list", "data": [{"id": MODEL_ID, "object": "model"}]})
        else:
            self._send(404, {"error": {"message": f"no route {self.path}"}})

    def do_POST(self) -> None:  # noqa: N802
        body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
        if self.path.rstrip("/") != "/v1/chat/completions":
            self._send(404, {"error": {"message": f"no route {self.path}"}})
            return
        r = self.server.model.next(body)
        if r.delay:
            time.sleep(r.delay)
        if r.status != 200:
            self._send(r.status, r.content, r.headers)
            return
        self._send(200, {
            "id": f"chatcmpl-{self.server.model.calls}",
            "object": "chat.completion",
            "model": body.get("model") or MODEL_ID,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": r.content},
                         "finish_reason": "stop"}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        }, r.headers)


class _Server(http.server.ThreadingHTTPServer):
    daemon_threads = True
    model: FakeModel


@pytest.fixture
def model_server() -> Iterator[tuple[FakeModel, str]]:
    """A FakeModel (configure its policy) and its base URL http://127.0.0.1:PORT/v1."""
    srv = _Server(("127.0.0.1", 0), _Handler)
    srv.model = FakeModel(policy=healthy)
    thread = threading.Thread(target=srv.serve_forever, kwargs={"poll_interval": 0.1}, daemon=True)
    thread.start()
    try:
        yield srv.model, f"http://127.0.0.1:{srv.server_address[1]}/v1"
    finally:
        srv.shutdown()
        srv.server_close()


# --- helpers --------------------------------------------------------------------------------------

def _fast_retries(env: TrialEnv) -> None:
    env.retry_wait_initial = 0.05


@pytest.fixture
def ctx(tmp_path: Path, docker_ready: None) -> Iterator[WorkspaceContext]:
    init_workspace(tmp_path / "ws", starter_tasks=False)
    c = WorkspaceContext.open(tmp_path / "ws")
    yield c
    if "store" in c.__dict__:
        c.store.close()


def harness_config(ctx: WorkspaceContext, endpoint: str) -> Path:
    """A copy of harness_configs/default.yaml whose model is the fake server."""
    cfg = yaml.safe_load((ctx.ws.harness_configs_dir / "default.yaml").read_text())
    cfg["model"] = {**cfg.get("model", {}), "endpoint": endpoint}
    path = ctx.ws.root / "harness_configs" / "fake-model.yaml"
    path.write_text(yaml.safe_dump(cfg, sort_keys=False))
    return path


def run_harness(ctx: WorkspaceContext, paths: list[Path], endpoint: str, provider: Any = None,
                **req: Any) -> JobOutcome:
    return run_job(
        ctx, RunRequest(paths=paths, agent="harness", configs=[harness_config(ctx, endpoint)], **req),
        provider=provider, trial_env_hook=_fast_retries,
    )


def result_json(t: TrialRow) -> dict[str, Any]:
    return json.loads((Path(t.trial_dir) / "result.json").read_text())


def describe(t: TrialRow) -> str:
    return (f"{t.task_name}: status={t.status} passed={t.passed} reward={t.reward} error={t.error_type} "
            f"({t.error_message}) retries={t.infra_retries} t_agent={t.t_agent:.2f} t_queue={t.t_queue:.2f} "
            f"turns={t.turns} attempts={t.infra_attempts_json}")


class StartsByTrial(CountingProvider):
    """CountingProvider that also records the kind of each sandbox started, per trial."""

    def __init__(self, inner: Any) -> None:
        super().__init__(inner)
        self.kinds: dict[str, list[str]] = {}

    def start(self, spec: Any) -> Any:
        with self._lock:
            self.kinds.setdefault(spec.labels.get(LABEL_TRIAL, "?"), []).append(spec.labels.get(LABEL_KIND, "?"))
        return super().start(spec)


# --- a. the agent kills its own sandbox -----------------------------------------------------------

def test_agent_killing_pid1_is_the_agents_fault_not_infra(
    ctx: WorkspaceContext, tmp_path: Path, model_server: tuple[FakeModel, str]
) -> None:
    model, url = model_server
    model.policy = scripted([bash("kill 1"), bash("echo still here"), bash("echo and here"), "DONE"])
    task = make_task(tmp_path / "tasks", "kill-init")
    provider = StartsByTrial(DockerSandboxProvider())
    out = run_harness(ctx, [task], url, provider)
    t = out.trials[0]
    assert t.error_type == ErrorType.AGENT_BROKE_SANDBOX.value, describe(t)
    assert not t.passed and not is_infra(t.error_type)
    assert t.infra_retries == 0 and t.infra_attempts == [], describe(t)
    kinds = provider.kinds.get(t.id, [])
    assert provider.starts <= 2 and kinds.count("trial") == 1 and kinds.count("verifier") <= 1, (
        f"the trial was retried: sandboxes started {provider.kinds}")
    # `kill 1` is asynchronous: one more command may still land before the init is gone, not two.
    assert model.calls <= 3, f"the agent went on after its sandbox died ({model.calls} model calls)"
    assert result_json(t)["error_type"] == ErrorType.AGENT_BROKE_SANDBOX.value
    assert out.job.status == "done"


def test_agent_killing_pid1_as_its_last_command_is_still_its_fault(
    ctx: WorkspaceContext, tmp_path: Path, model_server: tuple[FakeModel, str]
) -> None:
    # No further command fails: the dead container is noticed when rsi freezes it for grading.
    model, url = model_server
    model.policy = scripted([bash("echo ok > /app/out.txt; kill 1"), "DONE"])
    task = make_task(tmp_path / "tasks", "kill-init-last")
    out = run_harness(ctx, [task], url, StartsByTrial(DockerSandboxProvider()))
    t = out.trials[0]
    assert t.error_type == ErrorType.AGENT_BROKE_SANDBOX.value, describe(t)
    assert not t.passed and t.infra_retries == 0


# --- b. queue time is not agent time --------------------------------------------------------------

def test_model_queue_time_is_not_charged_to_the_agent(
    ctx: WorkspaceContext, tmp_path: Path, model_server: tuple[FakeModel, str]
) -> None:
    model, url = model_server
    model.policy = scripted([bash("echo ok > /app/out.txt"), bash("cat /app/out.txt"), "DONE"],
                            delay=2.0, headers={"X-Queue-Seconds": "2.0"})
    task = make_task(tmp_path / "tasks", "queued", agent_timeout=3)
    t = run_harness(ctx, [task], url).trials[0]
    assert t.error_type != ErrorType.AGENT_TIMEOUT.value, describe(t)
    assert (t.passed, t.reward, t.error_type, t.turns) == (True, 1.0, None, 3), describe(t)
    r = result_json(t)
    assert r["timings"]["model_queue"] >= 4.0, r["timings"]
    assert r["timings"]["model_queue"] == pytest.approx(6.0, abs=0.01), r["timings"]
    assert t.t_queue == pytest.approx(r["timings"]["model_queue"])
    assert r["timings"]["agent"] > 3.0, "the wall time must exceed the budget, else this shows nothing"


# --- c. client retries stop at the agent's budget -------------------------------------------------

def test_model_retries_never_outlast_the_agent_budget(
    ctx: WorkspaceContext, tmp_path: Path, model_server: tuple[FakeModel, str]
) -> None:
    model, url = model_server
    # Each 503 takes 2 s: the client's 4 attempts with back-off would take ~11.5 s.
    model.policy = unavailable(delay=2.0)
    task = make_task(tmp_path / "tasks", "no-model", agent_timeout=4)
    t = run_harness(ctx, [task], url).trials[0]
    assert t.error_type == ErrorType.MODEL_UNAVAILABLE.value, describe(t)
    assert not t.passed and is_infra(t.error_type)
    r = result_json(t)
    assert r["timings"]["agent"] < 8.0, f"{r['timings']} ({model.calls} model calls)"
    # the trial itself is re-run (grading.infra_retries), each attempt recorded as infra
    runs = ctx.contract.grading.infra_retries + 1
    assert [a["error_type"] for a in t.infra_attempts] == ["model_unavailable"] * (runs - 1)
    assert model.calls <= 3 * runs, f"{model.calls} calls in {runs} runs: the client retried past the budget"


# --- d. the circuit breaker, then a resume --------------------------------------------------------

def test_dead_endpoint_trips_the_breaker_and_resume_finishes(
    ctx: WorkspaceContext, tmp_path: Path, model_server: tuple[FakeModel, str]
) -> None:
    model, url = model_server
    model.policy = unavailable()
    tasks = [make_task(tmp_path / "tasks", f"b{i}", agent_timeout=2) for i in range(5)]
    assert ctx.contract.grading.infra_circuit_breaker == 3
    out = run_harness(ctx, [tmp_path / "tasks"], url, concurrency=1)
    assert out.stop == "breaker" and out.interrupted, (out.stop, out.reason)
    assert out.job.status == "interrupted"
    reason = out.job.interrupted_reason or ""
    assert "consecutive" in reason and "rsi doctor" in reason, reason
    done = [t for t in out.trials if t.status == "done"]
    left = [t for t in out.trials if t.status != "done"]
    assert 3 <= len(done) <= 4, [describe(t) for t in out.trials]
    assert all(t.error_type == ErrorType.MODEL_UNAVAILABLE.value for t in done), [describe(t) for t in done]
    assert left and all(t.status == "pending" for t in left), [describe(t) for t in left]
    failed_ids = {t.id for t in done}

    model.policy = healthy
    again = run_job(ctx, RunRequest(paths=[], resume=out.job.id), trial_env_hook=_fast_retries)
    assert again.job.id == out.job.id and again.job.status == "done" and not again.interrupted, again.reason
    assert len(again.trials) == len(tasks)
    for t in again.trials:
        assert t.status == "done" and t.passed and t.error_type is None, describe(t)
        if t.id in failed_ids:
            kinds = [a["error_type"] for a in t.infra_attempts]
            assert kinds == [ErrorType.MODEL_UNAVAILABLE.value], describe(t)
        else:
            assert t.infra_attempts == [], describe(t)


# --- e. image build failures ----------------------------------------------------------------------

FETCH = ('RUN python3 -c "import urllib.request; '
         'urllib.request.urlopen(\\"http://does-not-exist.invalid/\\", timeout=5)"\n')


@pytest.fixture(scope="module")
def build_failures(tmp_path_factory: pytest.TempPathFactory, docker_ready: None) -> dict[str, TrialRow]:
    root = tmp_path_factory.mktemp("builds")
    token = secrets.token_hex(4)
    tasks = root / "tasks"
    make_task(tasks, "run-false", dockerfile=DOCKERFILE + f"RUN echo {token} && false\n")
    make_task(tasks, "run-fetch", dockerfile=DOCKERFILE + f"RUN echo {token}\n" + FETCH)
    init_workspace(root / "ws", starter_tasks=False)
    c = WorkspaceContext.open(root / "ws")
    try:
        out = run_job(c, RunRequest(paths=[tasks], agent="oracle", concurrency=2), trial_env_hook=_fast_retries)
    finally:
        c.store.close()
    return {t.task_name: t for t in out.trials}


def test_failing_dockerfile_is_the_tasks_fault(build_failures: dict[str, TrialRow]) -> None:
    t = build_failures["run-false"]
    assert (t.passed, t.error_type, t.infra_retries) == (False, ErrorType.ENVIRONMENT_BUILD_FAILED.value, 0), (
        describe(t))
    assert not is_infra(t.error_type) and t.infra_attempts == []
    assert "false" in Path(t.trial_dir, "build.log").read_text()


def test_build_that_cannot_reach_the_network_is_infra(build_failures: dict[str, TrialRow]) -> None:
    t = build_failures["run-fetch"]
    assert t.error_type == ErrorType.SANDBOX_ERROR.value, describe(t)
    assert is_infra(t.error_type) and not t.passed
    retries = 2  # the contract's grading.infra_retries
    assert t.infra_retries == retries and len(t.infra_attempts) == retries, describe(t)
    assert "Name or service not known" in (t.error_message or "") or "does-not-exist" in (t.error_message or ""), (
        describe(t))
