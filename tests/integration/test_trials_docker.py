"""The trial runner against real Docker: every error type, the grading guarantees, limits, reuse, retries.

Most checks share one job (one tiny generated task each, run 3 at a time) so the module stays
fast; the ones that need their own provider or contract run their own small jobs.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from rsi.core.trial import ErrorType, is_infra
from rsi.exec.trial import TrialEnv
from rsi.loop.context import WorkspaceContext
from rsi.loop.init import init_workspace
from rsi.loop.run import JobOutcome, RunRequest, run_job
from rsi.report.jobs import summarize
from rsi.sandbox.docker import DockerSandboxProvider
from rsi.store.tables import TrialRow
from tests.taskgen import DOCKERFILE, SOLVE_OK, TEST_OK, CountingProvider, FlakyProvider, make_task

pytestmark = pytest.mark.docker

CGROUP_LIMITS = r"""
if [ -f /sys/fs/cgroup/cpu.max ]; then echo "cpu $(cat /sys/fs/cgroup/cpu.max)"
else echo "cpu $(cat /sys/fs/cgroup/cpu/cpu.cfs_quota_us) $(cat /sys/fs/cgroup/cpu/cpu.cfs_period_us)"; fi
if [ -f /sys/fs/cgroup/memory.max ]; then echo "mem $(cat /sys/fs/cgroup/memory.max)"
else echo "mem $(cat /sys/fs/cgroup/memory/memory.limit_in_bytes)"; fi
if [ -f /sys/fs/cgroup/pids.max ]; then echo "pids $(cat /sys/fs/cgroup/pids.max)"
else echo "pids $(cat /sys/fs/cgroup/pids/pids.max)"; fi
"""

NET_PROBE = r"""
python3 - > /app/net.txt <<'PY'
import os, socket
print("ifaces", ",".join(sorted(os.listdir("/sys/class/net"))))
try:
    socket.create_connection(("1.1.1.1", 53), timeout=3).close()
    print("connect ok")
except OSError as e:
    print("connect failed", e)
PY
"""

# The background process waits until grading begins (/tests appears) and then breaks the output.
BACKGROUND_SABOTEUR = SOLVE_OK + (
    "nohup setsid bash -c 'until [ -e /tests/test.sh ]; do sleep 0.05; done; echo bad > /app/out.txt' "
    ">/dev/null 2>&1 &\n"
)
SLOW_TEST_OK = "sleep 1.5\n" + TEST_OK


def _fast_retries(env: TrialEnv) -> None:
    env.retry_wait_initial = 0.05


def _run(ctx: WorkspaceContext, paths: list[Path], provider: Any = None, **req: Any) -> JobOutcome:
    req.setdefault("agent", "oracle")
    return run_job(ctx, RunRequest(paths=paths, **req), provider=provider, trial_env_hook=_fast_retries)


def _result_json(t: TrialRow) -> dict[str, Any]:
    return json.loads((Path(t.trial_dir) / "result.json").read_text())


def _open_ws(root: Path) -> WorkspaceContext:
    init_workspace(root, starter_tasks=False)
    return WorkspaceContext.open(root)


# --- one job, one task per behaviour ---------------------------------------------------------------

@pytest.fixture(scope="module")
def verdicts(tmp_path_factory: pytest.TempPathFactory, docker_ready: None) -> dict[str, TrialRow]:
    root = tmp_path_factory.mktemp("verdicts")
    tasks = root / "tasks"
    make_task(tasks, "pass")
    make_task(tasks, "build-fails", dockerfile=DOCKERFILE + f"RUN echo {secrets.token_hex(4)} && false\n")
    make_task(tasks, "agent-timeout", solve=SOLVE_OK + "sleep 60\n", agent_timeout=2)
    make_task(tasks, "verifier-timeout", test=TEST_OK + "sleep 60\n", verifier_timeout=2)
    make_task(tasks, "reward-missing", test="echo 'I forgot the reward'\n")
    make_task(tasks, "reward-invalid", test="mkdir -p /logs/verifier; echo nan > /logs/verifier/reward.txt\n")
    make_task(tasks, "tamper", solve=SOLVE_OK + "echo evil > /usr/bin/rsi-evil; chmod +x /usr/bin/rsi-evil\n")
    make_task(
        tasks, "forged-reward",
        solve="mkdir -p /logs/verifier && echo 1 > /logs/verifier/reward.txt\n",
        test="mkdir -p /logs/verifier; echo '{\"reward\": 0}' > /logs/verifier/reward.json\n",
    )
    make_task(tasks, "background", solve=BACKGROUND_SABOTEUR, test=SLOW_TEST_OK)
    # The task asks for bridge networking; the contract (network: false) must still cut it off.
    make_task(tasks, "network", solve=NET_PROBE, network_mode="bridge",
              test='cat /app/net.txt; mkdir -p /logs/verifier; '
                   'grep -qx "ifaces lo" /app/net.txt && grep -q "connect failed" /app/net.txt '
                   '&& echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n')
    # cpus 8 is above the contract's ceiling of 2: the contract wins.
    make_task(tasks, "limits", cpus=8, memory_mb=256, pids=64,
              solve=f"{{ {CGROUP_LIMITS} }} > /app/limits.txt\n",
              test=f"echo agent; cat /app/limits.txt; echo verifier; {{ {CGROUP_LIMITS} }}\n"
                   "mkdir -p /logs/verifier; echo 1 > /logs/verifier/reward.txt\n")
    ctx = _open_ws(root / "ws")
    out = _run(ctx, [tasks], concurrency=3)
    assert out.job.status == "done" and not out.interrupted
    rows = {t.task_name: t for t in out.trials}
    assert all(t.status == "done" for t in rows.values())
    return rows


def test_control_task_passes(verdicts: dict[str, TrialRow]) -> None:
    t = verdicts["pass"]
    assert (t.passed, t.reward, t.error_type) == (True, 1.0, None)
    assert t.t_agent > 0 and t.t_verify > 0


def test_build_failure_is_environment_build_failed(verdicts: dict[str, TrialRow]) -> None:
    t = verdicts["build-fails"]
    assert (t.passed, t.reward, t.error_type) == (False, None, ErrorType.ENVIRONMENT_BUILD_FAILED.value)
    log = (Path(t.trial_dir) / "build.log").read_text()
    assert "false" in log or "non-zero" in log, log[-500:]


def test_agent_timeout_is_enforced_and_still_graded(verdicts: dict[str, TrialRow]) -> None:
    t = verdicts["agent-timeout"]
    assert t.error_type == ErrorType.AGENT_TIMEOUT.value
    assert t.t_agent < 20, f"the 2 s agent timeout was not enforced (agent ran {t.t_agent:.1f}s)"
    assert t.reward == 1.0, "the verifier must still grade what the agent left"
    assert (Path(t.trial_dir) / "verifier" / "reward.txt").is_file()


def test_verifier_timeout_is_never_a_pass(verdicts: dict[str, TrialRow]) -> None:
    t = verdicts["verifier-timeout"]
    assert (t.passed, t.error_type) == (False, ErrorType.VERIFIER_TIMEOUT.value)
    assert t.t_verify < 25


def test_missing_reward(verdicts: dict[str, TrialRow]) -> None:
    t = verdicts["reward-missing"]
    assert (t.passed, t.reward, t.error_type) == (False, None, ErrorType.REWARD_MISSING.value)
    assert "I forgot the reward" in (Path(t.trial_dir) / "verifier" / "test-stdout.txt").read_text()


def test_invalid_reward(verdicts: dict[str, TrialRow]) -> None:
    t = verdicts["reward-invalid"]
    assert (t.passed, t.reward, t.error_type) == (False, None, ErrorType.REWARD_INVALID.value)


def test_changing_a_system_binary_voids_the_pass(verdicts: dict[str, TrialRow]) -> None:
    t = verdicts["tamper"]
    assert t.reward == 1.0, "the verifier itself accepted the output"
    assert (t.passed, t.error_type) == (False, ErrorType.TAMPER_DETECTED.value)
    r = _result_json(t)
    assert r["tampered_paths"] == ["/usr/bin/rsi-evil"]
    assert "/usr/bin/rsi-evil" in (t.error_message or "")


def test_clean_trial_has_no_tampered_paths(verdicts: dict[str, TrialRow]) -> None:
    r = _result_json(verdicts["pass"])
    assert r["tampered_paths"] == []
    assert "/app/out.txt" in r["changed_paths"]


def test_agent_cannot_forge_the_reward(verdicts: dict[str, TrialRow]) -> None:
    t = verdicts["forged-reward"]
    assert not t.passed
    assert t.reward == 0.0, "the agent's /logs/verifier/reward.txt must be wiped before test.sh runs"


def test_background_process_cannot_touch_the_verdict(verdicts: dict[str, TrialRow]) -> None:
    t = verdicts["background"]
    assert (t.passed, t.reward, t.error_type) == (True, 1.0, None)


def test_network_is_none_even_when_the_task_asks(verdicts: dict[str, TrialRow]) -> None:
    t = verdicts["network"]
    out = (Path(t.trial_dir) / "verifier" / "test-stdout.txt").read_text()
    assert "ifaces lo\n" in out and "connect failed" in out, out
    assert t.passed


def test_limits_are_applied_and_capped_by_the_contract(verdicts: dict[str, TrialRow]) -> None:
    t = verdicts["limits"]
    out = (Path(t.trial_dir) / "verifier" / "test-stdout.txt").read_text()
    agent, _, verifier = out.partition("verifier\n")
    for where, text in (("agent", agent), ("verifier", verifier)):
        assert "cpu 200000 100000" in text, f"{where} sandbox cpu quota is not the contract's 2 cpus:\n{text}"
        assert f"mem {256 << 20}" in text, f"{where} sandbox memory limit is not 256 MB:\n{text}"
        assert "pids 64" in text, f"{where} sandbox pids limit is not 64:\n{text}"


# --- jobs of their own ----------------------------------------------------------------------------

def test_background_process_flips_the_verdict_in_same_mode(tmp_path: Path) -> None:
    """The control of the test above: with the verifier in the agent's container the saboteur wins."""
    ws = tmp_path / "ws"
    init_workspace(ws, starter_tasks=False)
    cpath = ws / "contracts" / "hcp-1.0.yaml"
    c = yaml.safe_load(cpath.read_text())
    c["grading"]["verifier_mode"] = "same"
    cpath.write_text(yaml.safe_dump(c))
    make_task(tmp_path / "tasks", "background", solve=BACKGROUND_SABOTEUR, test=SLOW_TEST_OK)
    t = _run(WorkspaceContext.open(ws), [tmp_path / "tasks"]).trials[0]
    assert (t.passed, t.reward) == (False, 0.0)


@pytest.fixture
def unique_env_task(tmp_path: Path) -> Iterator[Path]:
    token = secrets.token_hex(6)
    d = make_task(tmp_path / "tasks", "reuse", dockerfile=DOCKERFILE + f"ENV RSI_TEST_TOKEN={token}\n")
    yield d
    api = DockerSandboxProvider().api
    for img in api.images(filters={"label": "rsi.kind=env"}):
        if any(token in str(v) for v in (img.get("Labels") or {}).values()) or any(
            token in str(e) for e in (api.inspect_image(img["Id"])["Config"].get("Env") or [])
        ):
            api.remove_image(img["Id"], force=True)


def test_second_job_builds_nothing(workspace: WorkspaceContext, unique_env_task: Path) -> None:
    first = CountingProvider(DockerSandboxProvider())
    out1 = _run(workspace, [unique_env_task], first, attempts=2, concurrency=2)
    assert all(t.passed for t in out1.trials)
    assert [r.built for r in first.images].count(True) == 1, "two trials of one env built it twice"
    tag = first.images[0].tag
    image_id = first.inner.image_id(tag)

    second = CountingProvider(DockerSandboxProvider())
    out2 = _run(workspace, [unique_env_task], second, attempts=2, concurrency=2)
    assert all(t.passed for t in out2.trials)
    assert second.images and not any(r.built for r in second.images), "the second job rebuilt the image"
    assert {r.tag for r in second.images} == {tag}
    assert second.inner.image_id(tag) == image_id


def test_transient_sandbox_error_is_retried(workspace: WorkspaceContext, tmp_path: Path) -> None:
    task = make_task(tmp_path / "tasks", "flaky")
    flaky = FlakyProvider(DockerSandboxProvider(), failures=1)
    t = _run(workspace, [task], flaky).trials[0]
    assert (t.passed, t.infra_retries, t.error_type) == (True, 1, None)


def test_persistent_sandbox_error_is_infra_not_the_model(workspace: WorkspaceContext, tmp_path: Path) -> None:
    task = make_task(tmp_path / "tasks", "broken")
    broken = FlakyProvider(DockerSandboxProvider(), failures=-1)
    out = _run(workspace, [task], broken)
    t = out.trials[0]
    assert (t.passed, t.reward, t.error_type) == (False, None, ErrorType.SANDBOX_ERROR.value)
    assert t.infra_retries == workspace.contract.grading.infra_retries
    assert broken.starts == workspace.contract.grading.infra_retries + 1
    assert is_infra(t.error_type)
    s = summarize(out.job, out.trials)
    assert s.infra_errors == 1 and s.tasks[0].graded == 0
